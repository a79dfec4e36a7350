package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// workerProcEnv, when set, makes the test binary run, instead of the
// tests, a worker process a test can kill: a worker fronting a stdio
// server through an adapter, as `mcpcancel worker --upstream-stdio` does,
// configured by the JSON procArgs the variable holds.
const workerProcEnv = "UPSTREAM_TEST_WORKER_PROC"

// procArgs configure a worker process.
type procArgs struct {
	Name, Coordinator string
	Command           []string // the upstream server's command line
	Config            string   // the adapter's per-tool options file
}

// runWorkerProc runs the worker process that args describe until SIGTERM,
// then drains (for at most a second) and stops the upstream server.
func runWorkerProc(args string) int {
	var p procArgs
	if err := json.Unmarshal([]byte(args), &p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := upstream.LoadConfig(p.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w := worker.New(worker.Options{Coordinator: p.Coordinator, Name: p.Name, DrainTimeout: time.Second, Logger: log})
	a := upstream.New(w, upstream.Options{Command: p.Command, Config: cfg, Logger: log})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	actx, stopAdapter := context.WithCancel(context.WithoutCancel(ctx))
	adapterDone := make(chan error, 1)
	go func() { adapterDone <- a.Run(actx) }() // owned here: waited for below
	err = w.Run(ctx, lis)
	stopAdapter() // after the worker drained: running calls still reach the server
	if err = errors.Join(err, <-adapterDone); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// procWorker is an `mcpcancel worker` process fronting server-everything
// on stdio, behind a tap.
type procWorker struct {
	name string
	tap  *tap
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
}

// startProcWorker starts a worker process named name with the adapter
// config config, and waits until the coordinator lists its tools.
func (st *stack) startProcWorker(t *testing.T, name, config string) *procWorker {
	t.Helper()
	upstreamCmd, tp := stdioEverything(t)
	cfg := filepath.Join(t.TempDir(), "upstream.json")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(procArgs{Name: name, Coordinator: st.coordAddr, Command: upstreamCmd, Config: cfg})
	w := &procWorker{name: name, tap: tp, done: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0])
	w.cmd.Env = append(os.Environ(), workerProcEnv+"="+string(args))
	log := &testWriter{t: t}
	w.cmd.Stdout, w.cmd.Stderr = log, log
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // owned by w: reaped here, waited for through done
		w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(20 * time.Second):
			w.cmd.Process.Kill()
			<-w.done
		}
		w.killServer(t) // in case it outlived its worker
		log.stop()
	})
	testcluster.WaitFor(t, name+"'s tools at the coordinator", func() bool {
		resp, err := st.coord.ListWorkers(t.Context(), &pb.ListWorkersRequest{})
		if err != nil {
			return false
		}
		for _, wi := range resp.GetWorkers() {
			if wi.GetName() == name && len(wi.GetTools()) > 0 {
				return true
			}
		}
		return false
	})
	return w
}

// kill kills the worker process and its server, as when a pod dies.
func (w *procWorker) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-w.done
	w.killServer(t)
}

// killServer kills every run of the worker's server: the tap and
// server-everything, in the tap's process group.
func (w *procWorker) killServer(t *testing.T) {
	t.Helper()
	taps, _ := w.tap.pids(t)
	for _, pid := range taps {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// calls counts the tools/call requests of tool the worker's server got.
func (w *procWorker) calls(t *testing.T, tool string) int {
	t.Helper()
	n := 0
	for _, m := range w.tap.messages(t) {
		if m.Dir == "in" && m.Method == "tools/call" && m.Params.Name == tool {
			n++
		}
	}
	return n
}

// running waits until one of ws has the call of tool, and returns it and
// the others.
func running(t *testing.T, tool string, ws ...*procWorker) (*procWorker, []*procWorker) {
	t.Helper()
	var got *procWorker
	testcluster.WaitFor(t, "the call at a worker's server", func() bool {
		for _, w := range ws {
			if w.calls(t, tool) > 0 {
				got = w
				return true
			}
		}
		return false
	})
	var rest []*procWorker
	for _, w := range ws {
		if w != got {
			rest = append(rest, w)
		}
	}
	return got, rest
}

const idempotentLongOp = `{"tools": {"` + longOp + `": {"idempotent": true}}}`

// A call of a tool the operator vouches is idempotent, whose worker is
// lost before anything of the call reached the client, runs once more on
// another worker, and the client gets that run's result. Its worker is
// lost either way a pod can lose it: the worker process dies (the gateway
// loses its Execute stream), or its upstream server dies (the worker
// reports the loss). The audit links the retry to the lost call.
func TestIdempotentCallRetriedOnAnotherWorker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lose   func(*procWorker, *testing.T)
		reason string // in the lost call's audit record
	}{
		{"the worker process dies", (*procWorker).kill, "execute stream lost"},
		{"its upstream server dies", (*procWorker).killServer, "went away during the call"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := startBare(t)
			a := st.startProcWorker(t, "wa", idempotentLongOp)
			b := st.startProcWorker(t, "wb", idempotentLongOp)
			s := connect(t, st.url)
			// No progress token: nothing reaches the client before the result.
			done := callInBackground(t, s, &mcp.CallToolParams{Name: longOp, Arguments: json.RawMessage(`{"duration":2,"steps":1}`)})
			lost, rest := running(t, longOp, a, b)
			other := rest[0]
			tc.lose(lost, t)
			o := await(t, done, "its worker was lost")
			if o.err != nil || o.res.IsError || !strings.Contains(text(o.res), "Steps: 1") {
				t.Fatalf("call = %q, %v; want the retry's result", text(o.res), o.err)
			}
			if n := other.calls(t, longOp); n != 1 {
				t.Fatalf("%s's server got %d calls; want the one retry", other.name, n)
			}
			recs := st.audits(t, longOp)
			if len(recs) != 2 {
				b, _ := json.Marshal(recs)
				t.Fatalf("audit: %s; want the lost call and its retry", b)
			}
			first, retry := recs[0], recs[1]
			if first.RetryOf != "" {
				first, retry = retry, first
			}
			if first.Outcome != "failed" || first.Initiator != "worker_lost" || first.Worker != lost.name || !strings.Contains(first.Reason, tc.reason) {
				t.Fatalf("lost call's audit = %+v; want failed, worker_lost, on %s, saying %q", first, lost.name, tc.reason)
			}
			if retry.Outcome != "completed" || retry.Worker != other.name || retry.RetryOf != first.CallID || string(retry.RequestID) != string(first.RequestID) {
				t.Fatalf("retry's audit = %+v; want completed on %s, retrying %s under the same request id", retry, other.name, first.CallID)
			}
			if n := st.retries(t, longOp); n != 1 {
				t.Fatalf("retries counted = %v", n)
			}
		})
	}
}

// A lost call is not retried when its tool is not vouched idempotent, or
// when the client already saw its progress: the client gets an error that
// says the worker was lost, and no other worker runs it.
func TestLostCallNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		progress     bool
	}{
		{"not idempotent", `{}`, false},
		{"progress reached the client", idempotentLongOp, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := startBare(t)
			a := st.startProcWorker(t, "wa", tc.config)
			b := st.startProcWorker(t, "wb", tc.config)
			s := connect(t, st.url)
			p := &mcp.CallToolParams{Name: longOp, Arguments: json.RawMessage(`{"duration":30,"steps":30}`)}
			if tc.progress {
				p.SetProgressToken("tok")
			}
			done := callInBackground(t, s, p)
			lost, rest := running(t, longOp, a, b)
			if tc.progress {
				s.waitProgress(t)
			}
			lost.kill(t)
			o := await(t, done, "its worker was lost")
			if o.err != nil || !o.res.IsError || !strings.Contains(text(o.res), "worker running this call was lost") {
				t.Fatalf("call = %q, %v; want an error result saying the worker was lost", text(o.res), o.err)
			}
			checkAudit(t, st, longOp, "failed", "worker_lost")
			if n := st.retries(t, longOp); n != 0 {
				t.Fatalf("retries counted = %v", n)
			}
			if n := rest[0].calls(t, longOp); n != 0 {
				t.Fatalf("%s's server got %d calls; want none", rest[0].name, n)
			}
		})
	}
}

// retries is the gateway's count of retries of tool.
func (st *stack) retries(t *testing.T, tool string) float64 {
	t.Helper()
	mfs, err := st.gw.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mcpcancel_gateway_retries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" && l.GetValue() == tool {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A client's cancel reaches the retry: the retry's server is told with its
// own request id, and the audit has the lost call and the cancelled retry.
func TestCancelReachesTheRetry(t *testing.T) {
	st := startBare(t)
	a := st.startProcWorker(t, "wa", idempotentLongOp)
	b := st.startProcWorker(t, "wb", idempotentLongOp)
	s := connect(t, st.url)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { // owned: the test reads done
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: longOp, Arguments: json.RawMessage(`{"duration":60,"steps":1}`)})
		done <- err
	}()
	lost, rest := running(t, longOp, a, b)
	other := rest[0]
	lost.kill(t)
	testcluster.WaitFor(t, "the retry at "+other.name+"'s server", func() bool { return other.calls(t, longOp) == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call returned a result")
	}
	testcluster.WaitFor(t, "the upstream cancel", func() bool { return len(cancelled(other.tap.messages(t))) > 0 })
	call := findCall(other.tap.messages(t), longOp, `"duration":60`)
	if got := cancelled(other.tap.messages(t)); len(got) != 1 || got[0] != string(call.ID) {
		t.Fatalf("%s's server got notifications/cancelled for %v; want its own id %s", other.name, got, call.ID)
	}
	var recs []*coordinator.AuditRecord
	testcluster.WaitFor(t, "the retry's audit record", func() bool { recs = st.audits(t, longOp); return len(recs) == 2 })
	byOutcome := map[string]*coordinator.AuditRecord{}
	for _, r := range recs {
		byOutcome[r.Outcome] = r
	}
	f, c := byOutcome["failed"], byOutcome["cancelled"]
	if f == nil || c == nil || f.Worker != lost.name || c.Worker != other.name || c.RetryOf != f.CallID || c.Initiator != "client" {
		b, _ := json.Marshal(recs)
		t.Fatalf("audit: %s; want the call failed on %s and its retry cancelled by the client on %s", b, lost.name, other.name)
	}
}
