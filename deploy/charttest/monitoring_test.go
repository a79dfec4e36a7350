package charttest

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// PrometheusRule (monitoring.coreos.com/v1), the fields the chart uses.
type prometheusRule struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   metav1ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

const (
	dashboardPath = chartDir + "/dashboards/mcpcancel.json"
	rulesPath     = chartDir + "/dashboards/mcpcancel.rules.yaml"
	runbookPath   = repoRoot + "/docs/operations.md"
)

// TestMonitoringOffByDefault: neither the dashboard nor the alerts are
// rendered unless asked for.
func TestMonitoringOffByDefault(t *testing.T) {
	m := render(t, nil)
	if len(all[*prometheusRule](m)) != 0 {
		t.Errorf("a PrometheusRule by default")
	}
	for _, cm := range all[*corev1.ConfigMap](m) {
		if _, ok := cm.Data["mcpcancel.json"]; ok {
			t.Errorf("the dashboard ConfigMap %s by default", cm.Name)
		}
	}
}

// TestMonitoring renders the dashboard and the alerts: the ConfigMap holds
// the dashboard file as it is, with the sidecar's label and the given
// annotations; the PrometheusRule holds the rules file's groups, with the
// given labels; every alert has a severity and a runbook that is a
// section of docs/operations.md.
func TestMonitoring(t *testing.T) {
	m := render(t, nil, "grafanaDashboard.enabled=true", "grafanaDashboard.annotations.grafana_folder=MCP",
		"prometheusRule.enabled=true", "prometheusRule.labels.release=prometheus")
	checkCommon(t, m)

	cm := find[*corev1.ConfigMap](t, m, full+"-dashboard")
	want := readFile(t, dashboardPath)
	if got := cm.Data["mcpcancel.json"]; strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("the ConfigMap's mcpcancel.json differs from %s", dashboardPath)
	}
	var dash struct{ UID, Title string }
	if err := json.Unmarshal([]byte(cm.Data["mcpcancel.json"]), &dash); err != nil || dash.UID != "mcpcancel" {
		t.Errorf("the dashboard is not JSON with uid mcpcancel: %v %+v", err, dash)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "MCP" {
		t.Errorf("dashboard ConfigMap labels %v, annotations %v; want grafana_dashboard=1 and grafana_folder=MCP", cm.Labels, cm.Annotations)
	}

	pr := find[*prometheusRule](t, m, full)
	if pr.Metadata.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v lack prometheusRule.labels", pr.Metadata.Labels)
	}
	var file struct{ Groups []ruleGroup }
	if err := yaml.UnmarshalStrict([]byte(readFile(t, rulesPath)), &file); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	if !reflect.DeepEqual(pr.Spec.Groups, file.Groups) {
		t.Errorf("the PrometheusRule's groups differ from %s:\n%+v\nwant\n%+v", rulesPath, pr.Spec.Groups, file.Groups)
	}
	checkRunbooks(t, pr.Spec.Groups)
}

var heading = regexp.MustCompile(`(?m)^#+ (.+)$`)

// checkRunbooks: every alert has a severity and a runbook_url naming a
// heading of docs/operations.md.
func checkRunbooks(t *testing.T, groups []ruleGroup) {
	t.Helper()
	anchors := map[string]bool{}
	for _, h := range heading.FindAllStringSubmatch(readFile(t, runbookPath), -1) {
		anchors[strings.ReplaceAll(strings.ToLower(h[1]), " ", "-")] = true
	}
	alerts := 0
	for _, g := range groups {
		for _, r := range g.Rules {
			alerts++
			_, anchor, _ := strings.Cut(r.Annotations["runbook_url"], "/docs/operations.md#")
			if !anchors[anchor] || anchor != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook_url %q is not its section of docs/operations.md", r.Alert, r.Annotations["runbook_url"])
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a severity, summary or description", r.Alert)
			}
		}
	}
	if alerts < 7 {
		t.Errorf("%d alerts, want the seven of docs/operations.md", alerts)
	}
}
