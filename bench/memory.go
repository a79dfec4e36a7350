package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
)

// deployment is the system as separate processes: etcd embedded in the
// bench process (so that no component's heap holds etcd's), and
// `mcpcancel coordinator`, `mcpcancel worker --demo` and `mcpcancel
// gateway --stdio` each in its own process with an admin endpoint.
type deployment struct {
	etcd    *embedetcd.Member
	cli     *clientv3.Client
	commits *commitCounter
	coord   *proc
	worker  *proc
	gw      *proc
	cs      *mcp.ClientSession // the one stdio client
	gwStdin io.WriteCloser     // the gateway's stdin: closing it is the disconnect
	hc      *http.Client
	// profileDir, if set, receives CPU profiles of each component taken
	// during the storm.
	profileDir string
}

func startDeployment(ctx context.Context, dir, bin string, calls int, profileDir string) (_ *deployment, err error) {
	if profileDir != "" {
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			return nil, err
		}
	}
	d := &deployment{hc: &http.Client{Timeout: 60 * time.Second}, profileDir: profileDir}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.etcd, err = embedetcd.Start(ctx, embedetcd.Options{Dir: filepath.Join(dir, "etcd")}); err != nil {
		return nil, err
	}
	if d.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{d.etcd.ClientURL()}, Logger: zap.NewNop()}); err != nil {
		return nil, err
	}
	d.commits = &commitCounter{metricsURL: d.etcd.ClientURL() + "/metrics", cli: d.cli, hc: d.hc}
	if d.coord, err = startProc(ctx, "coordinator", bin, []string{"coordinator", "admin"}, "coordinator",
		"--etcd", d.etcd.ClientURL(), "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "warn"); err != nil {
		return nil, err
	}
	addr := d.coord.get("coordinator")
	if d.worker, err = startProc(ctx, "worker", bin, []string{"worker", "admin"}, "worker", "--demo",
		"--coordinator", addr, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--name", "bench-mem-worker", "--log-level", "error"); err != nil {
		return nil, err
	}
	limit := strconv.Itoa(calls + 64)
	cmd := exec.Command(bin, "gateway", "--stdio", "--coordinator", addr, "--admin", "127.0.0.1:0",
		"--scope-limit", limit, "--global-limit", limit, "--call-timeout", "1h", "--log-level", "warn")
	p, stderr, err := newProc("gateway", cmd)
	if err != nil {
		return nil, err
	}
	// The pipes are ours, not the SDK's CommandTransport's: closing that
	// session waits for the calls in flight, and a client that disconnects
	// (crashes, loses its pipe) waits for nothing.
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if d.gwStdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d.gw = p
	go p.scan(stderr)
	if err := p.await(ctx, []string{"admin"}); err != nil {
		return nil, err
	}
	d.cs, err = newClient().Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: d.gwStdin}, &mcp.ClientSessionOptions{ProtocolVersion: protocol2025})
	if err != nil {
		return nil, fmt.Errorf("connect to gateway --stdio: %w", err)
	}
	return d, d.awaitEcho(ctx)
}

// awaitEcho polls until an echo call succeeds: the worker has attached
// and the gateway has seen its tools.
func (d *deployment) awaitEcho(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := echo(ctx, d.cs)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no echo through the deployment within 60s: %w", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (d *deployment) close() {
	if d.gwStdin != nil {
		d.gwStdin.Close() // the gateway cancels what is left and exits
	}
	for _, p := range []*proc{d.gw, d.worker, d.coord} {
		if p != nil {
			p.stop()
		}
	}
	if d.cs != nil {
		d.cs.Close() // its stream has ended with the gateway
	}
	if d.cli != nil {
		d.cli.Close()
	}
	if d.etcd != nil {
		d.etcd.Close()
	}
}

// The worker's gauges the memory run and the storm wait on: calls from
// their Execute until they end (outcome settled), and handlers that have
// not returned.
const (
	callsInFlight   = "mcpcancel_worker_calls_in_flight"
	handlersRunning = "mcpcancel_worker_running_handlers"
)

func (d *deployment) workerGauge(ctx context.Context, name string) (float64, error) {
	return gauge(ctx, d.hc, "http://"+d.worker.get("admin")+"/metrics", name)
}

// heaps reads gateway, coordinator and worker memory, in that order.
func (d *deployment) heaps(ctx context.Context) ([3]memStats, error) {
	var out [3]memStats
	for i, p := range []*proc{d.gw, d.coord, d.worker} {
		m, err := readMem(ctx, d.hc, p.get("admin"))
		if err != nil {
			return out, fmt.Errorf("%s: %w", p.name, err)
		}
		out[i] = m
	}
	return out, nil
}

// memoryResult is what the memory and storm run measured.
type memoryResult struct {
	calls                       int
	heapPerCall, stackPerCall   [3]float64 // gateway, coordinator, worker
	rampSeconds                 float64
	stormSeconds                float64 // to the last handler's return
	stormSettledSeconds         float64 // to the last call's end on the worker
	stormCommits, stormRevision float64
}

// stormLimit bounds the wait for the storm's last handler.
const stormLimit = 2 * time.Minute

// rampWave is how many calls the memory run starts before waiting for them
// to run: 10,000 Begins at once outrun etcd on a loaded 2-core machine and
// the last ones hit the coordinator's 5 s etcd deadline.
const rampWave = 250

// measureMemoryAndStorm puts calls sleep calls in flight on one stdio
// connection, reads every component's heap before and with them in
// flight, then closes the connection (one client disconnects) and times
// until the worker runs no handler.
func measureMemoryAndStorm(ctx context.Context, d *deployment, calls int) (memoryResult, error) {
	r := memoryResult{calls: calls}
	if err := d.warm(ctx); err != nil {
		return r, err
	}
	if _, err := d.commits.settle(ctx, 400*time.Millisecond, 10*time.Second); err != nil {
		return r, err
	}
	before, err := d.heaps(ctx)
	if err != nil {
		return r, err
	}
	start := time.Now()
	cs := d.cs
	callCtx, cancelCalls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancelCalls() // on an early return; after the storm the calls have ended
	var failed atomic.Int64
	var stormed atomic.Bool // calls fail by design once the storm starts
	var firstErr atomic.Pointer[error]
	for i := range calls {
		if i > 0 && i%rampWave == 0 {
			if err := d.awaitInflight(ctx, func(n float64) bool { return n >= float64(i) || failed.Load() > 0 }, 5*time.Minute); err != nil {
				return r, fmt.Errorf("ramping to %d calls in flight: %w", calls, err)
			}
		}
		wg.Go(func() {
			_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 3000, "steps": 1}})
			if err != nil && callCtx.Err() == nil && !stormed.Load() {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := d.awaitInflight(ctx, func(n float64) bool { return n >= float64(calls) || failed.Load() > 0 }, 5*time.Minute); err != nil {
		return r, fmt.Errorf("ramping to %d calls in flight: %w\ngateway stderr:\n%s", calls, err, d.gw.stderrTail())
	}
	if e := firstErr.Load(); e != nil {
		return r, fmt.Errorf("ramping to %d calls in flight: %d calls failed, the first with: %w\ngateway stderr:\n%s", calls, failed.Load(), *e, d.gw.stderrTail())
	}
	r.rampSeconds = round(time.Since(start).Seconds(), 3)
	mark, err := d.commits.settle(ctx, 400*time.Millisecond, 30*time.Second)
	if err != nil {
		return r, err
	}
	during, err := d.heaps(ctx)
	if err != nil {
		return r, err
	}
	d.profileHeaps(ctx)
	for i := range 3 {
		r.heapPerCall[i] = round((during[i].heapAlloc-before[i].heapAlloc)/float64(calls), 0)
		r.stackPerCall[i] = round((during[i].stackInuse-before[i].stackInuse)/float64(calls), 0)
	}
	stormed.Store(true)
	return r, d.storm(ctx, &r, mark)
}

// storm disconnects the client (closes the gateway's stdin, as a client
// process that dies would) and times until the last handler returned,
// then until the last call ended on the worker, its outcome settled.
func (d *deployment) storm(ctx context.Context, r *memoryResult, mark commitMark) error {
	profiled := d.profileStorm(ctx)
	defer profiled()
	start := time.Now()
	if err := d.gwStdin.Close(); err != nil {
		return err
	}
	for _, w := range []struct {
		gauge string
		at    *float64
	}{{handlersRunning, &r.stormSeconds}, {callsInFlight, &r.stormSettledSeconds}} {
		if err := d.awaitGauge(ctx, w.gauge, func(n float64) bool { return n == 0 }, stormLimit); err != nil {
			return fmt.Errorf("cancel storm: %w\ngateway stderr:\n%s\ncoordinator stderr:\n%s", err, d.gw.stderrTail(), d.coord.stderrTail())
		}
		*w.at = round(time.Since(start).Seconds(), 3)
	}
	after, err := d.commits.settle(ctx, 400*time.Millisecond, 60*time.Second)
	if err != nil {
		return err
	}
	r.stormCommits = after.proposals - mark.proposals
	r.stormRevision = float64(after.revision - mark.revision)
	return nil
}

// profileStorm, when the deployment has a profile directory, fetches a
// 5 s CPU profile of each component from the storm's start, as
// DIR/<component>-storm.pprof; the returned func waits for them.
func (d *deployment) profileStorm(ctx context.Context) func() {
	if d.profileDir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, p := range []*proc{d.gw, d.coord, d.worker} {
		wg.Go(func() {
			if err := fetchProfile(ctx, d.hc, p.get("admin"), "profile?seconds=5", filepath.Join(d.profileDir, p.name+"-storm.pprof")); err != nil {
				fmt.Fprintf(os.Stderr, "bench: profiling %s: %v\n", p.name, err)
			}
		})
	}
	return wg.Wait
}

// profileHeaps, when the deployment has a profile directory, fetches each
// component's heap profile with the calls in flight, as
// DIR/<component>-inflight.heap.pprof: what each in-flight call holds.
func (d *deployment) profileHeaps(ctx context.Context) {
	if d.profileDir == "" {
		return
	}
	for _, p := range []*proc{d.gw, d.coord, d.worker} {
		if err := fetchProfile(ctx, d.hc, p.get("admin"), "heap?gc=1", filepath.Join(d.profileDir, p.name+"-inflight.heap.pprof")); err != nil {
			fmt.Fprintf(os.Stderr, "bench: heap profile of %s: %v\n", p.name, err)
		}
	}
}

// fetchProfile saves the profile /debug/pprof/<which> of the process
// whose admin endpoint is admin.
func fetchProfile(ctx context.Context, hc *http.Client, admin, which, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/debug/pprof/"+which, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// warm runs some calls first so that pools, connections and caches exist
// before the baseline heap is read.
func (d *deployment) warm(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			if _, err := d.cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 0.05, "steps": 1}}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

func (d *deployment) awaitInflight(ctx context.Context, ok func(float64) bool, limit time.Duration) error {
	return d.awaitGauge(ctx, callsInFlight, ok, limit)
}

// awaitGauge polls one of the worker's gauges until ok, at most limit.
func (d *deployment) awaitGauge(ctx context.Context, name string, ok func(float64) bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := -1.0
	for {
		n, err := d.workerGauge(ctx, name)
		if err != nil {
			return err
		}
		if ok(n) {
			return nil
		}
		last = n
		if time.Now().After(deadline) {
			return errors.New("gave up after " + limit.String() + " with " + strconv.FormatFloat(last, 'f', 0, 64) + " in flight")
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
