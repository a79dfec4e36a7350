package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// Where the chart keeps its dashboard and alerting rules.
const (
	dashboardFile = "../../helm/mcpcancel/dashboards/mcpcancel.json"
	rulesFile     = "../../helm/mcpcancel/dashboards/mcpcancel.rules.yaml"
)

// TestDashboardAndRulesNameExportedMetrics runs a coordinator, a demo
// worker and a gateway with their admin ports, drives an echo and a
// cancelled sleep through them, and scrapes each /metrics: every metric
// the Grafana dashboard and the alerting rules query must be exported by
// one of them. It also checks the values the alerts rest on: one replica
// leads the janitor, the cancelled call's stop latency was observed, and
// a tool whose last worker leaves is reported with 0 workers.
func TestDashboardAndRulesNameExportedMetrics(t *testing.T) {
	etcd := etcdtest.Single(t)
	coord := start(t, nil, "coordinator", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--etcd", strings.Join(etcd.Endpoints(), ","))
	coordAddr := coord.waitLine(t, "coordinator: ")
	wk := start(t, nil, "worker", "--coordinator", coordAddr, "--demo", "--name", "w1", "--admin", "127.0.0.1:0")
	gw := start(t, nil, "gateway", "--http", "127.0.0.1:0", "--coordinator", coordAddr, "--admin", "127.0.0.1:0")
	admins := map[string]string{"coordinator": coord.waitLine(t, "admin: "), "worker": wk.waitLine(t, "admin: "), "gateway": gw.waitLine(t, "admin: ")}
	mcpURL := gw.waitLine(t, "mcp: ")
	waitForTools(t, pb.NewCoordinatorServiceClient(dialTest(t, coordAddr)), "echo", "sleep")

	callEcho(t, mcpSession(t, mcpURL, nil), 1)
	cancelSleep(t, mcpURL)

	used := queriedMetrics(t)
	var missing []string
	var values map[string]float64
	stopSeries := `mcpcancel_coordinator_stop_latency_seconds_count{outcome="cancelled"}`
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		var exported map[string]bool
		exported, values = scrapeAll(t, admins)
		missing = missing[:0]
		for name := range used {
			if !exported[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 && values[stopSeries] >= 1 {
			break
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			done = true
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the dashboard or the rules query metrics no component exports: %v", missing)
	}
	if values[stopSeries] != 1 {
		t.Errorf("%s = %v, want 1 (the cancelled sleep)", stopSeries, values[stopSeries])
	}
	for series, want := range map[string]float64{
		"mcpcancel_coordinator_janitor_leader":                                          1,
		`mcpcancel_coordinator_tool_workers{tool="echo"}`:                               1,
		"mcpcancel_coordinator_overdue_calls":                                           0,
		`mcpcancel_gateway_cancellations_total{result="won"}`:                           1,
		`mcpcancel_coordinator_decisions_total{initiator="client",outcome="cancelled"}`: 1,
	} {
		if values[series] != want {
			t.Errorf("%s = %v, want %v", series, values[series], want)
		}
	}
	if values["mcpcancel_coordinator_etcd_commit_duration_seconds_count"] < 2 {
		t.Errorf("etcd commits observed: %v, want at least the two decisions'", values["mcpcancel_coordinator_etcd_commit_duration_seconds_count"])
	}

	wk.signal(t, syscall.SIGTERM)
	if code := wk.exitCode(t); code != 0 {
		t.Fatalf("worker exited %d after SIGTERM", code)
	}
	poll(t, "echo reported with no live worker", func() bool {
		_, values := scrapeAll(t, map[string]string{"coordinator": admins["coordinator"]})
		v, ok := values[`mcpcancel_coordinator_tool_workers{tool="echo"}`]
		return ok && v == 0
	})
}

// queriedMetrics reads the metric names the dashboard's panels and the
// rules' expressions select.
func queriedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	exprs = append(exprs, ruleExprs(t)...)
	used := map[string]bool{}
	for _, e := range exprs {
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("no metric found in %q", e)
		}
		for _, n := range names {
			used[n] = true
		}
	}
	return used
}

// ruleExprs reads the expr of every alert in the rules file, written as
// one line or as a block scalar (expr: |), and checks there is one per
// alert.
func ruleExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var exprs []string
	alerts := 0
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if strings.HasPrefix(trimmed, "- alert:") {
			alerts++
		}
		rest, ok := strings.CutPrefix(trimmed, "expr:")
		if !ok {
			continue
		}
		if rest = strings.TrimSpace(rest); rest != "|" {
			exprs = append(exprs, rest)
			continue
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		var block []string
		for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent) {
			i++
			block = append(block, lines[i])
		}
		exprs = append(exprs, strings.Join(block, "\n"))
	}
	if alerts == 0 || len(exprs) != alerts {
		t.Fatalf("%s: %d alerts, %d exprs read", rulesFile, alerts, len(exprs))
	}
	return exprs
}

var (
	promStrings    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers   = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdentifier = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promKeywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true}
)

// metricNames returns the metric names a PromQL expression selects: its
// identifiers once strings, label matchers, ranges and groupings are
// removed, less function calls and keywords.
func metricNames(expr string) []string {
	expr = promStrings.ReplaceAllString(expr, "")
	expr = promMatchers.ReplaceAllString(expr, "")
	expr = promGrouping.ReplaceAllString(expr, "")
	var names []string
	for _, m := range promIdentifier.FindAllStringSubmatch(expr, -1) {
		if m[1] != "" || promKeywords[m[0]] {
			continue // a function
		}
		names = append(names, m[0])
	}
	return names
}

// scrapeAll fetches each component's /metrics and returns the names it
// exports (a histogram's _bucket, _sum and _count) and each sample's value
// by its series as written (name{labels}).
func scrapeAll(t *testing.T, admins map[string]string) (map[string]bool, map[string]float64) {
	t.Helper()
	exported, values := map[string]bool{}, map[string]float64{}
	for component, addr := range admins {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatalf("%s /metrics: %v", component, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
				exported[f[2]] = true
				if f[3] == "histogram" || f[3] == "summary" {
					exported[f[2]+"_bucket"], exported[f[2]+"_sum"], exported[f[2]+"_count"] = true, true, true
				}
				continue
			}
			if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
				if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
					values[line[:i]] += v
				}
			}
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("%s /metrics: %v", component, err)
		}
	}
	return exported, values
}

// TestMetricNames: the names TestDashboardAndRulesNameExportedMetrics
// checks are the selected metrics, not functions, labels or keywords.
func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum(up)`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (le, outcome) (rate(a_seconds_bucket{outcome="x", le!="1"}[$__rate_interval])))`, []string{"a_seconds_bucket"}},
		{`sum(rate(a_total[5m])) / sum(rate(b_total[5m])) > 0.25`, []string{"a_total", "b_total"}},
		{`sum(x) < 1 or absent(y)`, []string{"x", "y"}},
		{`max by (tool) (z) == 0 unless on (tool) w offset 5m`, []string{"z", "w"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
