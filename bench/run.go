package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type progressFunc func(format string, a ...any)

// measureInProcess measures the floor, cancel propagation, commits per
// call and throughput against the system started in this process.
func measureInProcess(ctx context.Context, c config, r *result, dir string, log *slog.Logger, progress progressFunc) error {
	if !c.runs("floor") && !c.runs("cancel") && !c.runs("commits") && !c.runs("throughput") {
		return nil
	}
	progress("starting etcd (fsync on), coordinator, worker and gateway in this process")
	s, err := startSystem(ctx, filepath.Join(dir, "inproc"), log)
	if err != nil {
		return err
	}
	defer s.close()
	hc := benchHTTPClient(2 * c.clients)
	counter := &commitCounter{metricsURL: s.etcd.ClientURL() + "/metrics", cli: s.writer, hc: hc}

	if c.runs("floor") {
		progress("floor: %d CAS Txns, each also timed to a second client's watch event", c.floorN)
		cas, watch, err := measureFloor(ctx, s.writer, s.second, c.floorN)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		r.setFloor(summarise(cas), summarise(watch))
	}
	if c.runs("cancel") {
		if err := measureAllCancels(ctx, c, r, s, hc, counter, progress); err != nil {
			return err
		}
	}
	if c.runs("commits") || c.runs("throughput") {
		if err := measureCommits(ctx, c, r, s, hc, counter, progress); err != nil {
			return err
		}
	}
	if !c.runs("throughput") {
		return nil
	}
	if err := measureThroughput(ctx, c, r, s.mcpURL, hc, counter, progress); err != nil {
		return err
	}
	if err := measureAddedLatency(ctx, c, r, s.mcpURL, hc, progress); err != nil {
		return err
	}
	if err := measurePeers(ctx, c, r, dir, log, progress); err != nil {
		return err
	}
	progress("etcd ceiling: CAS Txns from %d writers for %v", c.clients, c.ceilingWindow)
	rate, err := txnRate(ctx, s.writer, c.clients, c.ceilingWindow)
	if err != nil {
		return fmt.Errorf("etcd Txn rate: %w", err)
	}
	r.setCeiling(rate)
	return nil
}

func (r *result) setFloor(cas, watch dist) {
	r.FloorSamples = cas.N
	r.FloorCASP50, r.FloorCASP99, r.FloorCASMax = ms(cas.P50), ms(cas.P99), ms(cas.Max)
	r.FloorWatchP50, r.FloorWatchP99, r.FloorWatchMax = ms(watch.P50), ms(watch.P99), ms(watch.Max)
}

func (r *result) setCancel(transport string, d dist) {
	if r.Cancel == nil {
		r.Cancel = map[string]cancelJS{}
	}
	r.Cancel[transport] = cancelJS{Samples: d.N, P50: ms(d.P50), P99: ms(d.P99), Max: ms(d.Max)}
	if transport != "http2025" {
		return
	}
	r.CancelSamples, r.CancelP50, r.CancelP99, r.CancelMax = d.N, ms(d.P50), ms(d.P99), ms(d.Max)
	if r.FloorSamples == 0 {
		return
	}
	r.CancelP50VsFloor = ratio(r.CancelP50, r.FloorCASP50+r.FloorWatchP50)
	r.CancelP99VsFloor = ratio(r.CancelP99, r.FloorCASP99+r.FloorWatchP99)
}

func (r *result) setCeiling(txnPerSec float64) {
	r.EtcdTxnPerSec = round(txnPerSec, 0)
	if r.CommitsPerCall > 0 {
		r.EtcdCeilingCallsPerSec = round(txnPerSec/r.CommitsPerCall, 0)
		r.CallsVsCeiling = ratio(r.CallsPerSec, r.EtcdCeilingCallsPerSec)
	}
}

// measureAllCancels times cancels on each transport. The commits of the
// 2025 HTTP run, settled, give the commits per cancelled call.
func measureAllCancels(ctx context.Context, c config, r *result, s *system, hc *http.Client, counter *commitCounter, progress progressFunc) error {
	for _, t := range []struct {
		name    string
		connect func() (*mcp.ClientSession, func(), error)
	}{
		{"http2025", func() (*mcp.ClientSession, func(), error) {
			cs, err := httpSession(ctx, s.mcpURL, protocol2025, hc)
			return cs, func() {}, err
		}},
		{"stdio", func() (*mcp.ClientSession, func(), error) { return s.stdioSession(ctx, protocol2025) }},
		{"http2026", func() (*mcp.ClientSession, func(), error) {
			cs, err := httpSession(ctx, s.mcpURL, protocol2026, hc)
			return cs, func() {}, err
		}},
	} {
		progress("cancel propagation, %s: %d cancels", t.name, c.cancelN)
		cs, wait, err := t.connect()
		if err != nil {
			return err
		}
		before, err := counter.settle(ctx, 400*time.Millisecond, 10*time.Second)
		if err != nil {
			cs.Close()
			return err
		}
		ds, err := measureCancels(ctx, cs, s.probes, c.cancelN)
		cs.Close()
		wait()
		if err != nil {
			return fmt.Errorf("cancel %s after %d: %w", t.name, len(ds), err)
		}
		r.setCancel(t.name, summarise(ds))
		if t.name == "http2025" {
			after, err := counter.settle(ctx, 400*time.Millisecond, 30*time.Second)
			if err != nil {
				return err
			}
			r.CommitsPerCancelledCall, r.RevisionsPerCancelledCall = after.perCall(before, len(ds))
		}
	}
	return nil
}

// measureCommits counts etcd commits over commitN echo calls made one at
// a time, once etcd has settled after them.
func measureCommits(ctx context.Context, c config, r *result, s *system, hc *http.Client, counter *commitCounter, progress progressFunc) error {
	progress("etcd commits: %d echo calls one at a time", c.commitN)
	cs, err := httpSession(ctx, s.mcpURL, protocol2025, hc)
	if err != nil {
		return err
	}
	defer cs.Close()
	before, err := counter.settle(ctx, 400*time.Millisecond, 10*time.Second)
	if err != nil {
		return err
	}
	for range c.commitN {
		if err := echo(ctx, cs); err != nil {
			return err
		}
	}
	after, err := counter.settle(ctx, 400*time.Millisecond, 30*time.Second)
	if err != nil {
		return err
	}
	r.CommitCalls = c.commitN
	r.CommitsPerCall, r.RevisionsPerCall = after.perCall(before, c.commitN)
	return nil
}

// measureThroughput loads the gateway at url and a plain Go SDK server
// with the same echo load, in alternating one-second slices, counting
// etcd's commits meanwhile (the plain server makes none); then loads the
// gateway alone under the CPU profiler, for its CPU per call by component.
func measureThroughput(ctx context.Context, c config, r *result, url string, hc *http.Client, counter *commitCounter, progress progressFunc) error {
	plain, err := startPlain()
	if err != nil {
		return err
	}
	defer plain.close()
	gw, err := newEchoLoad(ctx, url, hc, c.clients)
	if err != nil {
		return fmt.Errorf("gateway throughput: %w", err)
	}
	defer gw.close()
	pl, err := newEchoLoad(ctx, plain.url, hc, c.clients)
	if err != nil {
		return fmt.Errorf("plain server throughput: %w", err)
	}
	defer pl.close()
	progress("throughput: %d clients calling echo for %v via the gateway and %v on a plain go-sdk server, alternating every %v", c.clients, c.window, c.window, throughputSlice)
	if counter == nil { // a remote gateway: neither its etcd nor its components are here
		rate, prate, err := echoRates(ctx, gw, pl, c.window)
		if err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
		r.setThroughput(c, rate, prate)
		return nil
	}
	before, err := counter.mark(ctx)
	if err != nil {
		return err
	}
	rate, prate, err := echoRates(ctx, gw, pl, c.window)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	after, err := counter.settle(ctx, 400*time.Millisecond, 30*time.Second)
	if err != nil {
		return err
	}
	r.setThroughput(c, rate, prate)
	r.CommitsPerCallLoaded, r.RevisionsPerCallLoaded = after.perCall(before, int(gw.calls))
	return measureCPU(ctx, c, r, gw, progress)
}

func (r *result) setThroughput(c config, rate, prate float64) {
	r.Clients, r.WindowSeconds = c.clients, c.window.Seconds()
	r.CallsPerSec, r.PlainCallsPerSec = round(rate, 0), round(prate, 0)
	r.CallsVsPlain = ratio(rate, prate)
}

// measureProcesses measures memory per in-flight call and the cancel storm
// with each component in its own process.
func measureProcesses(ctx context.Context, c config, r *result, dir string, progress progressFunc) error {
	progress("memory and storm: building mcpcancel and starting coordinator, worker and gateway --stdio as processes")
	bin, err := buildBinary(ctx, dir)
	if err != nil {
		return err
	}
	d, err := startDeployment(ctx, filepath.Join(dir, "procs"), bin, c.memCalls, c.profileDir)
	if err != nil {
		return err
	}
	defer d.close()
	progress("memory: %d sleep calls in flight on one stdio connection; then the storm: the client disconnects", c.memCalls)
	m, err := measureMemoryAndStorm(ctx, d, c.memCalls)
	if m.heapPerCall != [3]float64{} {
		r.MemoryCalls, r.MemoryRampSeconds = m.calls, m.rampSeconds
		r.GatewayBytesPerInflight, r.CoordinatorBytesPerInflight, r.WorkerBytesPerInflight = m.heapPerCall[0], m.heapPerCall[1], m.heapPerCall[2]
		r.GatewayStackPerInflight, r.CoordinatorStackPerInflight, r.WorkerStackPerInflight = m.stackPerCall[0], m.stackPerCall[1], m.stackPerCall[2]
	}
	if err != nil {
		return err
	}
	r.StormCalls, r.StormSeconds, r.StormSettledSeconds = m.calls, m.stormSeconds, m.stormSettledSeconds
	r.StormCommits, r.StormRevisions = m.stormCommits, m.stormRevision
	r.StormCommitsPerCall = ratio(m.stormCommits, float64(m.calls))
	return nil
}
