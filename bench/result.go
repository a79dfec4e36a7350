package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
)

// result is the one JSON object --json writes. Times are milliseconds,
// memory bytes. A figure that was not measured in this run is left out
// and named in Skipped.
type result struct {
	Mode      string  `json:"mode"` // "quick" or "full"
	Cores     int     `json:"cores"`
	GOOS      string  `json:"goos"`
	GOARCH    string  `json:"goarch"`
	GoVersion string  `json:"go_version"`
	CPU       string  `json:"cpu,omitempty"`
	Seconds   float64 `json:"seconds"`
	// LoadAvg is /proc/loadavg's 1-minute figure at the start and the end:
	// other work on the machine, which every figure here is exposed to.
	LoadAvgStart float64 `json:"load_avg_start,omitempty"`
	LoadAvgEnd   float64 `json:"load_avg_end,omitempty"`

	FloorSamples  int     `json:"floor_samples,omitempty"`
	FloorCASP50   float64 `json:"floor_cas_p50_ms,omitempty"`
	FloorCASP99   float64 `json:"floor_cas_p99_ms,omitempty"`
	FloorCASMax   float64 `json:"floor_cas_max_ms,omitempty"`
	FloorWatchP50 float64 `json:"floor_watch_p50_ms,omitempty"`
	FloorWatchP99 float64 `json:"floor_watch_p99_ms,omitempty"`
	FloorWatchMax float64 `json:"floor_watch_max_ms,omitempty"`
	EtcdTxnPerSec float64 `json:"etcd_txn_per_sec,omitempty"`

	CancelSamples int     `json:"cancel_samples,omitempty"` // 2025 HTTP, the headline
	CancelP50     float64 `json:"cancel_p50_ms,omitempty"`
	CancelP99     float64 `json:"cancel_p99_ms,omitempty"`
	CancelMax     float64 `json:"cancel_max_ms,omitempty"`
	// CancelP50VsFloor is cancel p50 ÷ (CAS p50 + watch p50); the target is
	// ≤ 2. CancelP99VsFloor likewise with the p99s.
	CancelP50VsFloor float64             `json:"cancel_p50_vs_floor,omitempty"`
	CancelP99VsFloor float64             `json:"cancel_p99_vs_floor,omitempty"`
	Cancel           map[string]cancelJS `json:"cancel_by_transport,omitempty"`

	Clients                int     `json:"throughput_clients,omitempty"`
	WindowSeconds          float64 `json:"throughput_seconds,omitempty"`
	CallsPerSec            float64 `json:"calls_per_sec,omitempty"`
	PlainCallsPerSec       float64 `json:"plain_calls_per_sec,omitempty"`
	EtcdCeilingCallsPerSec float64 `json:"etcd_ceiling_calls_per_sec,omitempty"`
	CallsVsPlain           float64 `json:"calls_vs_plain,omitempty"`
	CallsVsCeiling         float64 `json:"calls_vs_etcd_ceiling,omitempty"`

	// CommitsPerCallLoaded is etcd's commits per gateway call during the
	// throughput run (its clients at once); the target is at most 0.5.
	CommitsPerCallLoaded   float64 `json:"etcd_commits_per_call_loaded,omitempty"`
	RevisionsPerCallLoaded float64 `json:"etcd_revisions_per_call_loaded,omitempty"`

	// CPUPerCall is CPU milliseconds per gateway call by component (and
	// "clients", the benchmark's own), from a CPU profile of a window of
	// the throughput load; CPUPerCallMcpcancel sums the components;
	// ProcessCPUPerCall is this whole process's, clients included.
	CPUCalls            int                `json:"cpu_calls,omitempty"`
	CPUPerCall          map[string]float64 `json:"cpu_ms_per_call,omitempty"`
	CPUPerCallMcpcancel float64            `json:"cpu_ms_per_call_mcpcancel,omitempty"`
	ProcessCPUPerCall   float64            `json:"process_cpu_ms_per_call,omitempty"`

	// One session's echo calls, the gateway's and the plain server's in
	// turn: the latency the gateway adds at p50 and p99.
	LatencyCalls      int     `json:"latency_calls,omitempty"`
	GatewayLatencyP50 float64 `json:"gateway_latency_p50_ms,omitempty"`
	GatewayLatencyP99 float64 `json:"gateway_latency_p99_ms,omitempty"`
	PlainLatencyP50   float64 `json:"plain_latency_p50_ms,omitempty"`
	PlainLatencyP99   float64 `json:"plain_latency_p99_ms,omitempty"`
	AddedLatencyP50   float64 `json:"added_latency_p50_ms,omitempty"`
	AddedLatencyP99   float64 `json:"added_latency_p99_ms,omitempty"`

	// Peers fronting the same server-everything: "direct" (itself, over
	// Streamable HTTP), "mcp_proxy" and "mcpcancel" (the adapter), both
	// fronting it over stdio.
	PeerSessions int               `json:"peer_sessions,omitempty"`
	Peers        map[string]peerJS `json:"peers,omitempty"`

	CommitCalls               int     `json:"commit_calls,omitempty"`
	CommitsPerCall            float64 `json:"etcd_commits_per_call,omitempty"`
	CommitsPerCancelledCall   float64 `json:"etcd_commits_per_cancelled_call,omitempty"`
	RevisionsPerCall          float64 `json:"etcd_revisions_per_call,omitempty"`
	RevisionsPerCancelledCall float64 `json:"etcd_revisions_per_cancelled_call,omitempty"`

	MemoryCalls                 int     `json:"memory_inflight_calls,omitempty"`
	MemoryRampSeconds           float64 `json:"memory_ramp_seconds,omitempty"`
	GatewayBytesPerInflight     float64 `json:"gateway_bytes_per_inflight,omitempty"`
	CoordinatorBytesPerInflight float64 `json:"coordinator_bytes_per_inflight,omitempty"`
	WorkerBytesPerInflight      float64 `json:"worker_bytes_per_inflight,omitempty"`
	GatewayStackPerInflight     float64 `json:"gateway_stack_bytes_per_inflight,omitempty"`
	CoordinatorStackPerInflight float64 `json:"coordinator_stack_bytes_per_inflight,omitempty"`
	WorkerStackPerInflight      float64 `json:"worker_stack_bytes_per_inflight,omitempty"`

	StormCalls   int     `json:"storm_calls,omitempty"`
	StormSeconds float64 `json:"storm_10k_seconds,omitempty"`
	// StormSettledSeconds is the storm until the last call ended on the
	// worker, its outcome settled (StormSeconds is until the last handler
	// returned, which the gateway's CallersGone lets come first).
	StormSettledSeconds float64 `json:"storm_settled_seconds,omitempty"`
	StormCommits        float64 `json:"storm_etcd_commits,omitempty"`
	StormCommitsPerCall float64 `json:"storm_etcd_commits_per_call,omitempty"`
	StormRevisions      float64 `json:"storm_etcd_revisions,omitempty"`

	Notes   []string `json:"notes,omitempty"`
	Skipped []string `json:"skipped,omitempty"`
}

// peerJS is one peer's figures: calls/s with PeerSessions sessions, CPU
// per call of its front and of server-everything, and one session's
// latency and what the front adds over server-everything's own.
type peerJS struct {
	CallsPerSec           float64 `json:"calls_per_sec"`
	CPUPerCall            float64 `json:"cpu_ms_per_call"`
	FrontCPUPerCall       float64 `json:"front_cpu_ms_per_call"`
	UpstreamCPUPerCall    float64 `json:"upstream_cpu_ms_per_call"`
	OneSessionCallsPerSec float64 `json:"one_session_calls_per_sec"`
	P50                   float64 `json:"one_session_p50_ms"`
	P99                   float64 `json:"one_session_p99_ms"`
	AddedP50              float64 `json:"added_p50_ms"`
	AddedP99              float64 `json:"added_p99_ms"`
}

type cancelJS struct {
	Samples int     `json:"samples"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
}

func newResult(quick bool) *result {
	r := &result{Mode: "full", Cores: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(), CPU: cpuModel(), LoadAvgStart: loadAvg()}
	if quick {
		r.Mode = "quick"
	}
	return r
}

// loadAvg is the 1-minute load average, or 0 where there is none.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	fmt.Sscanf(string(b), "%g", &v)
	return v
}

// cpuModel is the first "model name" of /proc/cpuinfo, where there is one.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (r *result) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// print writes the readable table: each figure, its target where the
// issue sets one, and whether it is met.
func (r *result) print(w io.Writer) {
	fmt.Fprintf(w, "mcpcancel benchmark (%s mode) on %d cores %s/%s %s %s, %.0fs, load average %.1f → %.1f\n",
		r.Mode, r.Cores, r.GOOS, r.GOARCH, r.GoVersion, r.CPU, r.Seconds, r.LoadAvgStart, r.LoadAvgEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tVALUE\tTARGET\t")
	row := func(name, value, target string) { fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, value, target) }
	if r.FloorSamples > 0 {
		row(fmt.Sprintf("floor: etcd CAS Txn (n=%d)", r.FloorSamples), fmt.Sprintf("p50 %.3f ms  p99 %.3f ms  max %.3f ms", r.FloorCASP50, r.FloorCASP99, r.FloorCASMax), "")
		row("floor: Put → watch event, 2nd client", fmt.Sprintf("p50 %.3f ms  p99 %.3f ms  max %.3f ms", r.FloorWatchP50, r.FloorWatchP99, r.FloorWatchMax), "")
	}
	for _, k := range []string{"http2025", "stdio", "http2026"} {
		if c, ok := r.Cancel[k]; ok {
			row(fmt.Sprintf("cancel → handler ctx done, %s (n=%d)", k, c.Samples), fmt.Sprintf("p50 %.3f ms  p99 %.3f ms  max %.3f ms", c.P50, c.P99, c.Max), "")
		}
	}
	if r.CancelSamples > 0 && r.FloorSamples > 0 {
		row("cancel p50 ÷ floor p50 (CAS+watch)", fmt.Sprintf("%.2f×", r.CancelP50VsFloor), verdict(r.CancelP50VsFloor <= 2, "≤ 2×"))
		row("cancel p99 ÷ floor p99 (CAS+watch)", fmt.Sprintf("%.2f×", r.CancelP99VsFloor), verdict(r.CancelP99VsFloor <= 2, "≤ 2×"))
	}
	if r.CallsPerSec > 0 {
		row(fmt.Sprintf("echo calls/s via gateway (%d clients, %.0fs)", r.Clients, r.WindowSeconds), fmt.Sprintf("%.0f", r.CallsPerSec), "")
		row("echo calls/s, plain go-sdk server", fmt.Sprintf("%.0f  (gateway is %.1f%% of it)", r.PlainCallsPerSec, 100*r.CallsVsPlain), verdict(r.CallsVsPlain >= 0.8, "≥ 80%"))
	}
	if r.EtcdCeilingCallsPerSec > 0 {
		row("etcd ceiling calls/s (Txn/s ÷ commits/call)", fmt.Sprintf("%.0f  (%.0f Txn/s)", r.EtcdCeilingCallsPerSec, r.EtcdTxnPerSec), "")
		row("gateway ÷ etcd ceiling", fmt.Sprintf("%.1f%%", 100*r.CallsVsCeiling), verdict(r.CallsVsCeiling >= 0.5, "≥ 50%"))
	}
	if r.CommitsPerCallLoaded > 0 {
		row(fmt.Sprintf("etcd commits per call, %d clients", r.Clients), fmt.Sprintf("%.3f  (%.3f revisions)", r.CommitsPerCallLoaded, r.RevisionsPerCallLoaded), verdict(r.CommitsPerCallLoaded <= 0.5, "≤ 0.5"))
	}
	if r.CPUCalls > 0 {
		var parts []string
		for _, k := range append(components, "clients") {
			parts = append(parts, fmt.Sprintf("%s %.3f", k, r.CPUPerCall[k]))
		}
		row(fmt.Sprintf("CPU ms per call (n=%d)", r.CPUCalls), strings.Join(parts, "  "), "")
		row("CPU ms per call, mcpcancel's components", fmt.Sprintf("%.3f  (whole process %.3f)", r.CPUPerCallMcpcancel, r.ProcessCPUPerCall), "")
	}
	if r.LatencyCalls > 0 {
		row(fmt.Sprintf("one session: gateway, plain (n=%d)", r.LatencyCalls), fmt.Sprintf("p50 %.3f / %.3f ms  p99 %.3f / %.3f ms", r.GatewayLatencyP50, r.PlainLatencyP50, r.GatewayLatencyP99, r.PlainLatencyP99), "")
		row("latency the gateway adds", fmt.Sprintf("p50 %.3f ms  p99 %.3f ms", r.AddedLatencyP50, r.AddedLatencyP99),
			verdict(r.FloorSamples > 0 && r.AddedLatencyP50 <= r.FloorCASP50+1, "p50 ≤ CAS p50 + 1 ms"))
	}
	for _, k := range []string{"direct", "mcp_proxy", "mcpcancel"} {
		p, ok := r.Peers[k]
		if !ok {
			continue
		}
		row(fmt.Sprintf("server-everything echo, %s (%d sessions)", k, r.PeerSessions),
			fmt.Sprintf("%.0f calls/s  CPU %.3f ms/call (front %.3f + upstream %.3f)", p.CallsPerSec, p.CPUPerCall, p.FrontCPUPerCall, p.UpstreamCPUPerCall), "")
		row(fmt.Sprintf("  one session, %s", k), fmt.Sprintf("%.0f calls/s  p50 %.3f ms  p99 %.3f ms  (adds p50 %.3f, p99 %.3f)", p.OneSessionCallsPerSec, p.P50, p.P99, p.AddedP50, p.AddedP99), "")
	}
	if m, p := r.Peers["mcpcancel"], r.Peers["mcp_proxy"]; m.CallsPerSec > 0 && p.CallsPerSec > 0 {
		row("mcpcancel ÷ mcp-proxy calls/s", fmt.Sprintf("%.1f%%", 100*m.CallsPerSec/p.CallsPerSec), verdict(m.CallsPerSec >= p.CallsPerSec, "≥ 100%"))
		row("mcpcancel ÷ mcp-proxy CPU per call", fmt.Sprintf("%.2f×", m.CPUPerCall/max(p.CPUPerCall, 1e-9)), verdict(m.CPUPerCall <= p.CPUPerCall, "≤ 1×"))
	}
	if r.CommitCalls > 0 {
		// The design's 2 is Begin's and the decision's write Txns: the
		// revisions. Proposals also count what is no call's (the retention
		// lease's grant), so they are shown, not judged.
		row(fmt.Sprintf("etcd commits per call (n=%d)", r.CommitCalls), fmt.Sprintf("%.3f  (%.3f revisions)", r.CommitsPerCall, r.RevisionsPerCall), verdict(r.RevisionsPerCall <= 2.0, "≤ 2 revisions"))
	}
	if r.CommitsPerCancelledCall > 0 {
		// 2 plus the batched stopped_at record: no target of its own.
		row("etcd commits per cancelled call", fmt.Sprintf("%.3f  (%.3f revisions)", r.CommitsPerCancelledCall, r.RevisionsPerCancelledCall), "")
	}
	if r.MemoryCalls > 0 {
		for _, m := range []struct {
			name        string
			heap, stack float64
			target      float64
		}{{"gateway", r.GatewayBytesPerInflight, r.GatewayStackPerInflight, 8192}, {"coordinator", r.CoordinatorBytesPerInflight, r.CoordinatorStackPerInflight, 4096}, {"worker", r.WorkerBytesPerInflight, r.WorkerStackPerInflight, 8192}} {
			row(fmt.Sprintf("%s heap bytes per in-flight call (%d)", m.name, r.MemoryCalls), fmt.Sprintf("%.0f  (+%.0f stack)", m.heap, m.stack), verdict(m.heap <= m.target, fmt.Sprintf("≤ %.0f KiB", m.target/1024)))
		}
	}
	if r.StormCalls > 0 {
		row(fmt.Sprintf("cancel storm: %d calls, disconnect → last handler returned", r.StormCalls), fmt.Sprintf("%.3f s", r.StormSeconds), verdict(r.StormSeconds < 1, "< 1 s"))
		row("  the same, → last call settled and ended", fmt.Sprintf("%.3f s  (%.0f commits, %.3f per call)", r.StormSettledSeconds, r.StormCommits, r.StormCommitsPerCall), "")
	}
	tw.Flush()
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, s := range r.Skipped {
		fmt.Fprintln(w, "skipped:", s)
	}
}

func verdict(ok bool, target string) string {
	if ok {
		return target + "  met"
	}
	return target + "  MISSED"
}
