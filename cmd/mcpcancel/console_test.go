package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// chromiumPath finds Debian's chromium. Without it the browser test
// skips, unless CI is set: CI installs it, so there its absence fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed, and CI is set: install it with apt-get install -y chromium")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); this test runs in real headless Chromium. Set CI=true to make its absence a failure.")
	return ""
}

// artifactDir is where screenshots go: $MCPCANCEL_TEST_ARTIFACTS/NAME if
// set (kept), else a temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if root := os.Getenv("MCPCANCEL_TEST_ARTIFACTS"); root != "" {
		dir = filepath.Join(root, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// TestConsoleInBrowser opens the console `mcpcancel dev` prints in real
// headless Chromium, starts a sleep with the TypeScript MCP client, sees
// it in flight without a reload, cancels it with the page's button, and
// sees the client answered with an error naming the operator and the
// operator's decision row appear, still without a reload. Then, with more
// traffic of every kind, every chart on the page must draw data (the
// screenshots are kept as artifacts), and the cancelled call's page must
// draw its timeline.
func TestConsoleInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	shots := artifactDir(t)
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	coord := p.waitLine(t, "coordinator: ")
	mcpURL := p.waitLine(t, "mcp: ")
	consoleURL := p.waitLine(t, "console: ")
	if !strings.HasPrefix(consoleURL, "http://127.0.0.1:") {
		t.Fatalf("console: %s, want a loopback URL", consoleURL)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute) // chromium starts slowly on a loaded host
	defer cancel()
	cmd := nodetest.Node(t, ctx, "console-browser.mjs", "--console", consoleURL, "--mcp", mcpURL, "--shots", shots, "--chromium", chromium)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	events := browserEvents(t, out)
	if err != nil || events["done"] == nil {
		t.Fatalf("console-browser.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}

	inFlight := events["in_flight"]
	callID, _ := inFlight["call_id"].(string)
	if cells := strings.Join(anyStrings(inFlight["cells"]), " "); !strings.Contains(cells, "sleep") || !strings.Contains(cells, "anonymous") || !strings.Contains(cells, "dev-worker") {
		t.Errorf("in-flight row %q, want the sleep by anonymous on dev-worker", cells)
	}
	answer := events["client_answer"]
	if answer["is_error"] != true || !strings.Contains(answer["text"].(string), "an operator cancelled the call") {
		t.Errorf("the client was answered %v, want an error result saying an operator cancelled the call", answer)
	}
	decided := events["decided"]
	if decided["initiator"] != "operator" {
		t.Errorf("decision row %v, want initiator operator", decided)
	}
	if inFlight["loads"] != 1.0 || decided["loads"] != 1.0 {
		t.Errorf("page loads: %v before the cancel, %v after; want 1 (no reload)", inFlight["loads"], decided["loads"])
	}
	if events["page_error"] != nil {
		t.Errorf("the page's script failed: %v", events["page_error"])
	}
	checkOperatorAudit(t, coord, callID)
	charts, _ := events["charts"]["charts"].(map[string]any)
	checkCharts(t, charts)
	if marks := anyStrings(events["timeline"]["marks"]); !slices.Contains(marks, "requested") || !slices.Contains(marks, "decided") {
		t.Errorf("the cancelled call's timeline picture marks %q, want requested and decided", marks)
	}
	for _, f := range []string{"1-in-flight.png", "2-decided.png", "3-charts.png", "4-calls-page.png", "5-call-timeline.png"} {
		if st, err := os.Stat(filepath.Join(shots, f)); err != nil || st.Size() == 0 {
			t.Errorf("screenshot %s: %v", f, err)
		}
	}
	if n := pngColours(t, filepath.Join(shots, "3-charts.png")); n < 8 {
		t.Errorf("the charts' screenshot has %d colours: nothing drawn", n)
	}
}

// checkCharts: every chart on the calls page drew data, and the series
// name the outcomes and initiators the run produced.
func checkCharts(t *testing.T, charts map[string]any) {
	t.Helper()
	for _, name := range []string{"in_flight", "outcomes", "initiators", "stop_latency", "duration", "workers", "cancel_lost"} {
		c, _ := charts[name].(map[string]any)
		if c == nil || c["total"].(float64) <= 0 || c["shapes"].(float64) <= 0 {
			t.Errorf("chart %s drew %v, want data", name, c)
		}
	}
	series := func(name string) []string {
		c, _ := charts[name].(map[string]any)
		if c == nil {
			return nil
		}
		return anyStrings(c["series"])
	}
	for _, want := range []string{"completed", "cancelled", "cancel_lost"} {
		if !slices.Contains(series("outcomes"), want) {
			t.Errorf("outcomes chart series %q, want %s", series("outcomes"), want)
		}
	}
	for _, want := range []string{"client", "operator", "none"} {
		if !slices.Contains(series("initiators"), want) {
			t.Errorf("initiators chart series %q, want %s", series("initiators"), want)
		}
	}
	if !slices.Contains(series("workers"), "dev-worker") {
		t.Errorf("workers chart series %q, want dev-worker", series("workers"))
	}
}

// pngColours counts the distinct colours of a PNG.
func pngColours(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r >> 8, g >> 8, bl >> 8, a >> 8}] = true
		}
	}
	return len(seen)
}

// checkOperatorAudit finds the call's one decision: cancelled by the
// console's loopback operator.
func checkOperatorAudit(t *testing.T, coord, callID string) {
	t.Helper()
	resp, err := pb.NewCoordinatorServiceClient(dialTest(t, coord)).ListAudit(t.Context(), &pb.ListAuditRequest{CallId: callID})
	if err != nil {
		t.Fatal(err)
	}
	want := "cancelled by operator local (unverified: no client certificate): cancelled from the console"
	if len(resp.Records) != 1 || resp.Records[0].GetInitiator() != pb.Initiator_INITIATOR_OPERATOR || resp.Records[0].GetReason() != want {
		t.Errorf("audit of %s: %v, want one record by the operator with reason %q", callID, resp.Records, want)
	}
}

func browserEvents(t *testing.T, out []byte) map[string]map[string]any {
	t.Helper()
	events := map[string]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("console-browser.mjs printed %q: %v", sc.Text(), err)
		}
		name, _ := m["event"].(string)
		events[name] = m
	}
	return events
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestDevNamesTheFlagOfAPortInUse: dev on a port another process holds
// says which flag moves it.
func TestDevNamesTheFlagOfAPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	for _, flag := range []string{"http", "coordinator-listen", "console-listen"} {
		t.Run(flag, func(t *testing.T) {
			args := map[string]string{"http": "127.0.0.1:0", "coordinator-listen": "127.0.0.1:0", "console-listen": "127.0.0.1:0"}
			args[flag] = addr
			code, _, stderr := runExit(t, "dev", "--http", args["http"], "--coordinator-listen", args["coordinator-listen"], "--console-listen", args["console-listen"])
			if want := addr + " is in use (another mcpcancel dev?): pass --" + flag + " HOST:PORT, or port 0 for a free one"; code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr:\n%s\nwant it to say %q", code, stderr, want)
			}
		})
	}
}

// TestConsoleRefusesStrangers: a request naming the console by another
// host (a DNS-rebinding page) is refused, and so is a cross-site POST.
func TestConsoleRefusesStrangers(t *testing.T) {
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	url := p.waitLine(t, "console: ")
	for _, tc := range []struct {
		name, method, host, site string
		want                     int
	}{
		{"the console", "GET", "", "", http.StatusOK},
		{"another host name", "GET", "evil.example:80", "", http.StatusForbidden},
		{"a cross-site cancel", "POST", "", "cross-site", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := url
			if tc.method == "POST" {
				target += "calls/" + strings.Repeat("0", 32) + "/cancel"
			}
			req, err := http.NewRequestWithContext(t.Context(), tc.method, target, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.site != "" {
				req.Header.Set("Sec-Fetch-Site", tc.site)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: %d, want %d", tc.method, target, resp.StatusCode, tc.want)
			}
		})
	}
}

// TestConsoleCommand serves `mcpcancel console` for a coordinator on
// loopback; on another address it refuses to start without certificates.
func TestConsoleCommand(t *testing.T) {
	_, coord := startCoordinator(t)
	c := start(t, nil, "console", "--coordinator", coord, "--listen", "127.0.0.1:0")
	url := c.waitLine(t, "console: ")
	poll(t, "the console page", func() bool {
		resp, err := http.Get(url + "workers")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	code, _, stderr := runExit(t, "console", "--coordinator", coord, "--listen", "0.0.0.0:0")
	if want := "is not loopback: give --tls-cert, --tls-key and --tls-ca"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("console on 0.0.0.0: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}

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
