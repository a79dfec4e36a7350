package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// mcpcancel builds the binary from the repository once per test run, with
// the version stamped the way the Dockerfile stamps it.
func mcpcancel(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "charttest")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "mcpcancel")
		cmd := exec.Command("go", "build", "-o", binPath,
			"-ldflags", "-X "+versionVar(t)+"=v9.8.7-charttest", "./cmd/mcpcancel")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = &buildError{err, string(out)}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "go build ./cmd/mcpcancel: " + e.err.Error() + "\n" + e.out
}

var helpFlag = regexp.MustCompile(`(?m)^  --([a-z0-9-]+)(?: (\S+))?`)

// helpFlags are the flags `mcpcancel SUB --help` lists.
func helpFlags(t *testing.T, sub string) map[string]bool {
	t.Helper()
	out, err := exec.Command(mcpcancel(t), sub, "--help").Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("mcpcancel %s --help: %v", sub, err)
	}
	flags := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		t.Fatalf("mcpcancel %s --help lists %d flags:\n%s", sub, len(flags), out)
	}
	return flags
}

// helpPlaceholders are the flags `mcpcancel SUB --help` lists, each with
// the placeholder of its value ("file", "duration", ...; "" for a switch).
func helpPlaceholders(t *testing.T, sub string) map[string]string {
	t.Helper()
	out, _ := exec.Command(mcpcancel(t), sub, "--help").Output()
	flags := map[string]string{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = m[2]
	}
	if len(flags) < 3 {
		t.Fatalf("mcpcancel %s --help lists %d flags:\n%s", sub, len(flags), out)
	}
	return flags
}

// TestChartFlagsExist: every --flag the chart passes to mcpcancel, in every
// scenario, is one the binary's subcommand has.
func TestChartFlagsExist(t *testing.T) {
	known := map[string]map[string]bool{}
	for _, sc := range scenarios {
		m := render(t, sc.values)
		for _, w := range workloads(m) {
			for _, c := range w.Pod.Spec.Containers {
				sub := subcommand(c)
				if sub == "" {
					continue
				}
				if known[sub] == nil {
					known[sub] = helpFlags(t, sub)
				}
				for _, a := range c.Args[1:] {
					name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
					if !strings.HasPrefix(a, "--") || !known[sub][name] {
						t.Errorf("%s: %s %s/%s passes %q, which `mcpcancel %s --help` does not list", sc.name, w.Kind, w.Name, c.Name, a, sub)
					}
				}
				checkFlagValues(t, sc.name, c)
			}
		}
	}
	if len(known) != 3 {
		t.Errorf("checked the flags of %d subcommands, want gateway, coordinator and worker", len(known))
	}
}

// TestVersionStamp: the -X variable the Dockerfile stamps is the one
// `mcpcancel version` prints.
func TestVersionStamp(t *testing.T) {
	out, err := exec.Command(mcpcancel(t), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "v9.8.7-charttest") {
		t.Errorf("mcpcancel version = %q; the -X %s stamp did not take", out, versionVar(t))
	}
}

// checkFlagValues parses c's args with the binary itself: with --help
// last, mcpcancel parses every flag before it (a malformed duration or
// number is a usage error, status 2) and then prints help (status 0).
// $(VAR)s are what Kubernetes would put there.
func checkFlagValues(t *testing.T, scenario string, c corev1.Container) {
	t.Helper()
	expand := strings.NewReplacer("$(POD_IP)", "10.1.2.3", "$(POD_NAME)", "pod-0")
	args := make([]string, 0, len(c.Args)+1)
	for _, a := range c.Args {
		args = append(args, expand.Replace(a))
	}
	cmd := exec.Command(mcpcancel(t), append(args, "--help")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no MCPCANCEL_* from the test's environment
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: mcpcancel %s does not parse: %v\n%s", scenario, strings.Join(args, " "), err, lastLines(string(out), 3))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
