package charttest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The documents whose commands must match the chart, and the part of each
// that is about it.
var docs = []struct{ path, section string }{
	{repoRoot + "/README.md", "## Deploy on Kubernetes"},
	{repoRoot + "/docs/deploy.md", ""},
	{chartDir + "/README.md", ""},
}

var (
	shBlock   = regexp.MustCompile("(?s)```sh\n(.*?)```")
	yamlBlock = regexp.MustCompile("(?s)\n( *)```yaml\n(.*?)\n *```")
	heredoc   = regexp.MustCompile(`(?s)cat > (\S+) <<'EOF'\n(.*?)\nEOF\n`)
	kubeRef   = regexp.MustCompile(`\b(svc|deployment|statefulset)/([a-z0-9-]+)`)
	fwdPorts  = regexp.MustCompile(`port-forward svc/([a-z0-9-]+) \d+:(\d+)`)
)

// section is the text of doc from the heading to the next one of its level.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	if heading == "" {
		return text
	}
	_, rest, ok := strings.Cut(text, heading+"\n")
	if !ok {
		t.Fatalf("no section %q", heading)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// shellWords splits a command line as sh would for plain words and quotes.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			i = len(line)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestDocsCommandsMatchChart renders every `helm install` and `helm
// upgrade` command of the docs (as helm template, with the files the docs
// write) and every values example, checks each rendering like a scenario,
// and checks that every object a kubectl command of the same document
// names is rendered.
func TestDocsCommandsMatchChart(t *testing.T) {
	for _, d := range docs {
		t.Run(strings.TrimPrefix(d.path, repoRoot+"/"), func(t *testing.T) {
			text := section(t, readFile(t, d.path), d.section)
			dir := t.TempDir()
			for _, h := range heredoc.FindAllStringSubmatch(text, -1) {
				if err := os.WriteFile(filepath.Join(dir, h[1]), []byte(h[2]+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rendered := map[string]bool{}
			servicePorts := map[string][]int32{}
			var refs [][]string
			installs := 0
			for _, block := range shBlock.FindAllStringSubmatch(text, -1) {
				for _, line := range strings.Split(strings.ReplaceAll(block[1], "\\\n", " "), "\n") {
					refs = append(refs, kubeRef.FindAllStringSubmatch(line, -1)...)
					w := shellWords(line)
					if len(w) < 2 || w[0] != "helm" || (w[1] != "install" && w[1] != "upgrade") {
						continue
					}
					installs++
					m := renderDocCommand(t, w, dir)
					for _, o := range m.Objects {
						rendered[strings.ToLower(o.Kind)+"/"+o.Name] = true
					}
					for _, s := range all[*corev1.Service](m) {
						for _, p := range s.Spec.Ports {
							servicePorts[s.Name] = append(servicePorts[s.Name], p.Port)
						}
					}
				}
			}
			for _, block := range shBlock.FindAllStringSubmatch(text, -1) {
				for _, f := range fwdPorts.FindAllStringSubmatch(block[1], -1) {
					port, _ := strconv.Atoi(f[2])
					if !slices.Contains(servicePorts[f[1]], int32(port)) {
						t.Errorf("%s: port-forward to svc/%s port %d, which it does not have (%v)", d.path, f[1], port, servicePorts[f[1]])
					}
				}
			}
			if installs == 0 {
				t.Fatalf("%s has no helm install command", d.path)
			}
			renderValuesExamples(t, text)
			kinds := map[string]string{"svc": "service", "deployment": "deployment", "statefulset": "statefulset"}
			for _, r := range refs {
				if !rendered[kinds[r[1]]+"/"+r[2]] {
					t.Errorf("%s names %s/%s, which its helm commands do not render", d.path, r[1], r[2])
				}
			}
		})
	}
}

// renderDocCommand renders `helm install|upgrade ...` words as helm
// template, with -f files from dir: once as written (for the names the
// document uses), and once as release rel in namespace mcp, checked like
// every scenario.
func renderDocCommand(t *testing.T, w []string, dir string) *manifest {
	t.Helper()
	var rel, chart, ns string
	var values, sets []string
	for i := 2; i < len(w); i++ {
		switch a := w[i]; {
		case a == "--install" || a == "--create-namespace":
		case (a == "--namespace" || a == "-n" || a == "-f" || a == "--values" || a == "--set") && i+1 < len(w):
			i++
			switch a {
			case "--namespace", "-n":
				ns = w[i]
			case "--set":
				sets = append(sets, w[i])
			default:
				values = append(values, filepath.Join(dir, w[i]))
			}
		case strings.HasPrefix(a, "-"):
			t.Fatalf("%v: flag %s not understood by this test", w, a)
		case rel == "":
			rel = a
		case chart == "":
			chart = a
		default:
			t.Fatalf("%v: extra argument %s", w, a)
		}
	}
	if chart != "helm/mcpcancel" || ns == "" {
		t.Fatalf("%v: want the chart helm/mcpcancel, from the repository root, and a --namespace", w)
	}
	args := templateArgs(values, sets...)
	args[1], args[4] = rel, ns
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out, ns)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, render(t, values, sets...))
	return m
}

// renderValuesExamples renders every ```yaml block of text that is chart
// values (its top-level keys are values.yaml's) over the defaults, and
// checks each rendering like a scenario (every file a flag names is
// mounted) and its flags with the binary: what an example sets must work
// on its own.
func renderValuesExamples(t *testing.T, text string) {
	t.Helper()
	var defaults map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, chartDir+"/values.yaml")), &defaults); err != nil {
		t.Fatal(err)
	}
	for i, b := range yamlBlock.FindAllStringSubmatch(text, -1) {
		body := unindent(b[2], b[1])
		var example map[string]any
		if err := yaml.Unmarshal([]byte(body), &example); err != nil || len(example) == 0 {
			continue
		}
		if slices.ContainsFunc(slices.Collect(maps.Keys(example)), func(k string) bool { _, ok := defaults[k]; return !ok }) {
			continue // not chart values
		}
		file := filepath.Join(t.TempDir(), fmt.Sprintf("example-%d.yaml", i))
		if err := os.WriteFile(file, []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("values example %d", i), func(t *testing.T) {
			m := render(t, []string{file})
			checkCommon(t, m)
			for _, w := range workloads(m) {
				for _, c := range w.Pod.Spec.Containers {
					if subcommand(c) != "" {
						checkFlagValues(t, file, c)
					}
				}
			}
		})
	}
}

// unindent removes indent from the start of every line of s.
func unindent(s, indent string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(lines, "\n")
}
