package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// Paths from this module's directory.
const (
	repoRoot  = "../.."
	chartDir  = "../../helm/mcpcancel"
	release   = "rel"
	namespace = "mcp"
)

// helmBin finds helm: $HELM, else helm on $PATH, else $(go env GOPATH)/bin.
func helmBin(t testing.TB) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		h := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(h); err == nil {
			return h
		}
	}
	t.Fatal("no helm: run scripts/chart-test.sh (it installs helm v3.22.0), or set HELM")
	return ""
}

// helm runs helm with args and returns its stdout, or its error with stderr.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// templateArgs are the helm template arguments for values files (from
// testdata unless absolute) and --set pairs.
func templateArgs(values []string, sets ...string) []string {
	args := []string{"template", release, chartDir, "--namespace", namespace}
	for _, v := range values {
		if !filepath.IsAbs(v) {
			v = filepath.Join("testdata", v)
		}
		args = append(args, "-f", v)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// object is one rendered document, decoded into its typed form.
type object struct {
	Kind, Name string
	Source     string // the template it came from
	Obj        any    // *appsv1.Deployment, *corev1.Service, ...
}

// manifest is a rendered chart.
type manifest struct {
	Objects []object
	NOTES   string
}

var docSplit = regexp.MustCompile(`(?m)^---\s*$`)

// render renders the chart with values files and decodes every document
// strictly.
func render(t testing.TB, values []string, sets ...string) *manifest {
	t.Helper()
	out, err := helm(t, templateArgs(values, sets...)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out, namespace)
	if err != nil {
		t.Fatal(err)
	}
	m.NOTES = renderNotes(t, values, sets...)
	return m
}

// renderNotes renders NOTES.txt, which helm template leaves out: from a copy
// of the chart with a template that renders it into a YAML string.
func renderNotes(t testing.TB, values []string, sets ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mcpcancel")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes := readFile(t, filepath.Join(dir, "templates", "NOTES.txt"))
	for path, text := range map[string]string{
		"notes.txt":               notes,
		"templates/zz-notes.yaml": `notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}` + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := templateArgs(values, sets...)
	args[2] = dir
	out, err := helm(t, append(args, "--show-only", "templates/zz-notes.yaml")...)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Notes string }
	if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Notes
}

// decodeManifest decodes helm template's output for namespace ns.
func decodeManifest(out, ns string) (*manifest, error) {
	m := &manifest{}
	for _, doc := range docSplit.Split(out, -1) {
		source := ""
		if i := strings.Index(doc, "# Source: "); i >= 0 {
			source, _, _ = strings.Cut(doc[i+len("# Source: "):], "\n")
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", source, err)
		}
		if s := strings.TrimSpace(string(j)); s == "null" || s == "{}" {
			continue // comments only
		}
		o, err := decodeObject(j, ns)
		if err != nil {
			return nil, fmt.Errorf("%s: %v\n%s", source, err, doc)
		}
		o.Source = source
		m.Objects = append(m.Objects, o)
	}
	return m, nil
}

// newTyped returns the Go type of a rendered kind, or nil for one the
// chart must not render.
func newTyped(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "networking.k8s.io/v1 Ingress":
		return &networkingv1.Ingress{}
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &serviceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &prometheusRule{}
	case "cert-manager.io/v1 Certificate":
		return &certificate{}
	}
	return nil
}

// decodeObject decodes one document's JSON into its type; an unknown field
// is an error, and so is a namespace other than ns.
func decodeObject(j []byte, ns string) (object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(j, &head); err != nil {
		return object{}, err
	}
	typed := newTyped(head.APIVersion, head.Kind)
	if typed == nil {
		return object{}, fmt.Errorf("unexpected kind %s %s", head.APIVersion, head.Kind)
	}
	if head.Metadata.Name == "" || head.Metadata.Namespace != ns {
		return object{}, fmt.Errorf("%s: name %q, namespace %q (want the release's)", head.Kind, head.Metadata.Name, head.Metadata.Namespace)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(typed); err != nil {
		return object{}, fmt.Errorf("%s %s: %v", head.Kind, head.Metadata.Name, err)
	}
	return object{Kind: head.Kind, Name: head.Metadata.Name, Obj: typed}, nil
}

// ServiceMonitor (monitoring.coreos.com/v1), the fields the chart uses.
type serviceMonitor struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Metadata   metav1ObjectMeta   `json:"metadata"`
	Spec       serviceMonitorSpec `json:"spec"`
}

type metav1ObjectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	NamespaceSelector struct {
		MatchNames []string `json:"matchNames"`
	} `json:"namespaceSelector"`
	Endpoints []struct {
		Port     string `json:"port"`
		Path     string `json:"path"`
		Interval string `json:"interval"`
	} `json:"endpoints"`
}

// Certificate (cert-manager.io/v1), the fields the chart uses.
type certificate struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   metav1ObjectMeta `json:"metadata"`
	Spec       struct {
		SecretName string `json:"secretName"`
		CommonName string `json:"commonName"`
		Subject    struct {
			OrganizationalUnits []string `json:"organizationalUnits"`
		} `json:"subject"`
		DNSNames    []string `json:"dnsNames"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		Usages    []string `json:"usages"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// Lookups.

func all[T any](m *manifest) []T {
	var out []T
	for _, o := range m.Objects {
		if v, ok := o.Obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func find[T any](t testing.TB, m *manifest, name string) T {
	t.Helper()
	for _, o := range m.Objects {
		if v, ok := o.Obj.(T); ok && o.Name == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %q rendered", zero, name)
	return zero
}

func has[T any](m *manifest, name string) bool {
	for _, o := range m.Objects {
		if _, ok := o.Obj.(T); ok && o.Name == name {
			return true
		}
	}
	return false
}

// workload is a pod template with its owner's name.
type workload struct {
	Kind, Name string
	Pod        *corev1.PodTemplateSpec
}

func workloads(m *manifest) []workload {
	var out []workload
	for _, d := range all[*appsv1.Deployment](m) {
		out = append(out, workload{"Deployment", d.Name, &d.Spec.Template})
	}
	for _, s := range all[*appsv1.StatefulSet](m) {
		out = append(out, workload{"StatefulSet", s.Name, &s.Spec.Template})
	}
	return out
}

// component is a pod's app.kubernetes.io/component label.
func component(p *corev1.PodTemplateSpec) string {
	return p.Labels["app.kubernetes.io/component"]
}

// subcommand is the mcpcancel subcommand a container runs, or "".
func subcommand(c corev1.Container) string {
	if len(c.Command) > 0 || len(c.Args) == 0 {
		return ""
	}
	switch c.Args[0] {
	case "gateway", "coordinator", "worker":
		return c.Args[0]
	}
	return ""
}

// flagValue is the value of --name=VALUE in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if a == "--"+name {
			return "", true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
