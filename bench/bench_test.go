package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// TestQuick runs every in-process measurement with tiny counts against the
// real system (embedded etcd with fsync, coordinator, worker, gateway, Go
// SDK clients) and checks that each figure was measured and is sane, and
// that --json carries the keys the issue names. The separate-process
// memory and storm run is left to `go run ./bench --quick`: it builds the
// binary, which is too slow for a unit test.
func TestQuick(t *testing.T) {
	c := config{floorN: 20, cancelN: 5, commitN: 10, clients: 4, window: 300 * time.Millisecond, ceilingWindow: 200 * time.Millisecond, quick: true}
	r := newResult(true)
	log := slog.New(slog.DiscardHandler)
	if err := measureInProcess(t.Context(), c, r, t.TempDir(), log, func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []string{"http2025", "stdio", "http2026"} {
		if got := r.Cancel[tr].Samples; got != c.cancelN {
			t.Errorf("%s: %d cancel samples, want %d", tr, got, c.cancelN)
		}
	}
	if r.FloorSamples != c.floorN || r.FloorCASP50 <= 0 || r.FloorWatchP99 < r.FloorWatchP50 || r.FloorCASMax < r.FloorCASP99 {
		t.Errorf("floor = n %d, CAS p50 %v p99 %v max %v, watch p50 %v p99 %v", r.FloorSamples, r.FloorCASP50, r.FloorCASP99, r.FloorCASMax, r.FloorWatchP50, r.FloorWatchP99)
	}
	// A completed call commits its record at least (one commit when its
	// Begin lingered and its Complete created the record settled); a
	// cancelled one its Begin and its cancel, but its handler stops
	// before the cancel commits, so the bench's next call begins beside
	// it and the two may share a commit. Fewer than one means the
	// counting is broken, not that the product improved.
	if r.CommitsPerCall < 1 || r.CommitsPerCancelledCall < 1 {
		t.Errorf("commits per call %v, per cancelled call %v: want at least 1 each", r.CommitsPerCall, r.CommitsPerCancelledCall)
	}
	if r.CallsPerSec <= 0 || r.PlainCallsPerSec <= 0 || r.EtcdCeilingCallsPerSec <= 0 {
		t.Errorf("throughput %v, plain %v, ceiling %v: want all positive", r.CallsPerSec, r.PlainCallsPerSec, r.EtcdCeilingCallsPerSec)
	}
	// Under load decisions share commits, but a call still commits
	// something; more than its Begin and Complete alone means counting
	// picked up something else.
	if r.CommitsPerCallLoaded <= 0 || r.CommitsPerCallLoaded > 2.5 {
		t.Errorf("commits per call under load %v: want in (0, 2.5]", r.CommitsPerCallLoaded)
	}
	// Too few samples to split reliably at these counts (TestCPUByLabel
	// checks the split): only that mcpcancel's components used some.
	if r.CPUCalls <= 0 || r.CPUPerCallMcpcancel <= 0 || r.ProcessCPUPerCall < r.CPUPerCallMcpcancel {
		t.Errorf("CPU per call: %d calls, %v by component, mcpcancel %v, process %v", r.CPUCalls, r.CPUPerCall, r.CPUPerCallMcpcancel, r.ProcessCPUPerCall)
	}
	if r.LatencyCalls != c.floorN || r.GatewayLatencyP50 <= 0 || r.PlainLatencyP50 <= 0 || r.GatewayLatencyP99 < r.GatewayLatencyP50 {
		t.Errorf("one-session latency: n %d, gateway p50 %v p99 %v, plain p50 %v", r.LatencyCalls, r.GatewayLatencyP50, r.GatewayLatencyP99, r.PlainLatencyP50)
	}
	for _, k := range []string{"direct", "mcp_proxy", "mcpcancel"} {
		p, ok := r.Peers[k]
		// /proc counts CPU in 10 ms ticks: at these counts one process's
		// share may round to none, the sum hardly.
		if !ok || p.CallsPerSec <= 0 || p.CPUPerCall <= 0 || p.FrontCPUPerCall < 0 || p.UpstreamCPUPerCall < 0 || p.P50 <= 0 || p.OneSessionCallsPerSec <= 0 {
			t.Errorf("peer %s: %+v (measured %v)", k, p, ok)
		}
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := r.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"floor_cas_p50_ms", "floor_cas_p99_ms", "floor_watch_p99_ms", "cancel_p50_ms", "cancel_p99_ms",
		"calls_per_sec", "plain_calls_per_sec", "etcd_ceiling_calls_per_sec", "etcd_commits_per_call", "etcd_commits_per_cancelled_call",
		"cores", "goos", "goarch", "go_version", "etcd_commits_per_call_loaded", "cpu_ms_per_call", "added_latency_p50_ms", "added_latency_p99_ms", "peers"} {
		if _, ok := got[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	var out bytes.Buffer
	r.print(&out)
	if !strings.Contains(out.String(), "quick mode") || !strings.Contains(out.String(), "cancel → handler ctx done, stdio") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestSummarise(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := summarise(d)
	want := dist{N: 100, P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if got != want {
		t.Errorf("summarise = %+v, want %+v", got, want)
	}
	if (summarise(nil) != dist{}) {
		t.Error("summarise(nil) is not empty")
	}
	if got := summarise([]time.Duration{7}); got.P50 != 7 || got.P99 != 7 || got.Max != 7 {
		t.Errorf("one sample: %+v", got)
	}
}

// The parser reads this process's own heap profile, in the format the
// admin endpoints serve.
func TestParseMemStats(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	m, err := parseMemStats(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if m.heapAlloc <= 0 || m.stackInuse <= 0 {
		t.Errorf("parsed %+v from a live process", m)
	}
	if _, err := parseMemStats(strings.NewReader("heap profile: 0: 0 [0: 0] @ heap/1048576\n")); err == nil {
		t.Error("a profile without MemStats parsed")
	}
}

func TestMetricValue(t *testing.T) {
	text := "# HELP x\n# TYPE etcd_server_proposals_committed_total gauge\netcd_server_proposals_committed_total_other 9\netcd_server_proposals_committed_total 1234\n"
	v, err := metricValue(bufio.NewScanner(strings.NewReader(text)), "etcd_server_proposals_committed_total")
	if err != nil || v != 1234 {
		t.Errorf("metricValue = %v, %v; want 1234", v, err)
	}
	if _, err := metricValue(bufio.NewScanner(strings.NewReader(text)), "absent"); err == nil {
		t.Error("an absent metric was found")
	}
}

func TestParseConfig(t *testing.T) {
	c, err := parseConfig([]string{"--quick", "--only", "floor,cancel"}, io.Discard)
	if err != nil || !c.quick || !c.runs("floor") || c.runs("memory") || c.cancelN != quickConfig().cancelN {
		t.Errorf("parseConfig = %+v, %v", c, err)
	}
	for _, args := range [][]string{{"--only", "nope"}, {"--mcp", "http://127.0.0.1:1/mcp"}, {"extra"}} {
		if _, err := parseConfig(args, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) accepted", args)
		}
	}
}

// CPU spent under a label is found under that label in the profile, and
// none under a label that did no work.
func TestCPUByLabel(t *testing.T) {
	p, err := startCPUProfile()
	if err != nil {
		t.Skip(err)
	}
	var sink int
	labelled("spin", func() error {
		for start := processCPU(); processCPU()-start < 300*time.Millisecond; {
			for i := range 100000 {
				sink += i
			}
		}
		return nil
	})
	labelled("idle", func() error { return nil })
	got, err := p.stop()
	if err != nil {
		t.Fatal(err)
	}
	if got["spin"] < 50*time.Millisecond || got["idle"] != 0 {
		t.Errorf("CPU by label %v after spinning 300ms under spin (sink %d)", got, sink)
	}
}
