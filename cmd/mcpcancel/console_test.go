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
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
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
