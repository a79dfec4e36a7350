package coordinator_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks(
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		// Peer HTTP connections between etcd members of a stopped cluster
		// wind down on their own.
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	)...)
}

const prefix = "/mcpcancel/v1/"

// held is one running call of the hold tool, as its handler sees it.
type held struct {
	id      string
	ctx     context.Context
	release chan *worker.Result
}

// holdTool blocks each call until the test releases it. With stubborn set,
// the handler ignores cancellation and returns whatever it is released
// with, as a badly behaved tool would.
type holdTool struct {
	started  chan *held
	stubborn bool
}

func newHoldTool(stubborn bool) *holdTool {
	return &holdTool{started: make(chan *held, 1024), stubborn: stubborn}
}

func (h *holdTool) register(w *worker.Worker) {
	w.Handle(worker.Tool{Name: "hold", Description: "waits to be released"}, h.handle)
	w.Handle(worker.Tool{Name: "echo"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		var a struct{ Text string }
		if err := c.Bind(&a); err != nil {
			return nil, err
		}
		return worker.Text(a.Text), nil
	})
}

func (h *holdTool) handle(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	me := &held{id: c.ID, ctx: ctx, release: make(chan *worker.Result, 1)}
	h.started <- me
	c.Progress(1, 2, "holding")
	if h.stubborn {
		return <-me.release, nil
	}
	select {
	case r := <-me.release:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *holdTool) next(t *testing.T) *held {
	t.Helper()
	select {
	case c := <-h.started:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
		return nil
	}
}

// env is a coordinator (or several), a worker with the hold tool, and etcd.
type env struct {
	etcd   *etcdtest.Cluster
	cli    *clientv3.Client
	coords []*testcluster.Coordinator
	hold   *holdTool
	w      *testcluster.Worker
	c      pb.CoordinatorServiceClient
	wc     pb.WorkerServiceClient
}

type envOptions struct {
	replicas int
	stubborn bool
	coord    coordinator.Options
	etcd     *etcdtest.Cluster
	// workerTo lists the replicas the worker may attach to (default all).
	workerTo []int
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{etcd: o.etcd, hold: newHoldTool(o.stubborn)}
	if e.etcd == nil {
		e.etcd = etcdtest.Single(t)
	}
	e.cli = e.etcd.Client()
	for i := range max(o.replicas, 1) {
		co := o.coord
		co.Name = []string{"a", "b", "c"}[i]
		e.coords = append(e.coords, testcluster.StartCoordinator(t, e.cli, co))
	}
	if o.workerTo == nil {
		for i := range e.coords {
			o.workerTo = append(o.workerTo, i)
		}
	}
	var target string
	for i, r := range o.workerTo {
		if i > 0 {
			target += ","
		}
		target += e.coords[r].Addr
	}
	e.w = testcluster.StartWorker(t, worker.Options{Coordinator: target, Name: "w1"}, e.hold.register)
	e.c = e.coords[0].Client(t)
	e.wc = e.w.Client(t)
	waitTools(t, e.c, "hold")
	return e
}

// waitTools waits until the replica's view offers tool.
func waitTools(t *testing.T, c pb.CoordinatorServiceClient, tool string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		resp, err := c.ListTools(t.Context(), &pb.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range resp.Tools {
			if tl.Name == tool {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tool %q never offered", tool)
		}
	}
}

func num(n int64) *pb.RequestId   { return &pb.RequestId{Kind: &pb.RequestId_Number{Number: n}} }
func text(s string) *pb.RequestId { return &pb.RequestId{Kind: &pb.RequestId_Text{Text: s}} }

func key(scope string, id *pb.RequestId) *pb.CallKey { return &pb.CallKey{Scope: scope, RequestId: id} }

func (e *env) begin(t *testing.T, c pb.CoordinatorServiceClient, k *pb.CallKey, tool string) *pb.BeginResponse {
	t.Helper()
	resp, err := c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: tool, Principal: "alice", Gateway: "g1"})
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	return resp
}

// execStream is an open Execute stream and what it has carried.
type execStream struct {
	stream   pb.WorkerService_ExecuteClient
	progress int
}

func (e *env) execute(t *testing.T, b *pb.BeginResponse, tool, args string) *execStream {
	t.Helper()
	s, err := e.wc.Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.CallId, Fence: b.Fence, Tool: tool, ArgumentsJson: []byte(args), Deadline: b.Deadline, Progress: true,
	})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	return &execStream{stream: s}
}

// final reads the stream to its end and returns its final event.
func (s *execStream) final(t *testing.T) *pb.ExecuteResponse {
	t.Helper()
	var last *pb.ExecuteResponse
	for {
		m, err := s.stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("execute stream: %v", err)
		}
		if last != nil && last.GetProgress() == nil {
			t.Fatalf("event after the final one: %v", m)
		}
		if m.GetProgress() != nil {
			s.progress++
		}
		last = m
	}
	if last == nil || last.GetProgress() != nil {
		t.Fatalf("stream ended without a final event (last %v)", last)
	}
	return last
}

func (e *env) cancel(t *testing.T, c pb.CoordinatorServiceClient, k *pb.CallKey, reason string) pb.CancelResult {
	t.Helper()
	resp, err := c.Cancel(t.Context(), &pb.CancelRequest{
		Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT, Reason: reason,
	})
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	return resp.Result
}

// audits reads every audit record of a call straight from etcd.
func (e *env) audits(t *testing.T, callID string) []*coordinator.AuditRecord {
	t.Helper()
	return auditsFrom(t, e.cli)[callID]
}

func auditsFrom(t *testing.T, cli *clientv3.Client) map[string][]*coordinator.AuditRecord {
	t.Helper()
	return testcluster.Audits(t, cli)
}

func outcomes(as []*coordinator.AuditRecord) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Outcome)
	}
	return out
}

// revision is etcd's current revision: it moves on every write.
func (e *env) revision(t *testing.T) int64 {
	t.Helper()
	resp, err := e.cli.Get(t.Context(), "revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func (e *env) state(t *testing.T, callID string) pb.CallState {
	t.Helper()
	resp, err := e.c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: callID}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Call.State
}

// waitDone waits for a handler's context to be done.
func waitDone(t *testing.T, h *held) {
	t.Helper()
	select {
	case <-h.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("handler context was not cancelled")
	}
}

// commitTxns is how many Txns the first replica's group committer sent.
func commitTxns(t *testing.T, e *env) float64 {
	t.Helper()
	mfs, err := e.coords[0].Server.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "mcpcancel_coordinator_etcd_commit_duration_seconds" {
			return float64(mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	t.Fatal("mcpcancel_coordinator_etcd_commit_duration_seconds not found")
	return 0
}

// etcdDeletes is how many deletes the etcd members of this test process
// have applied (etcd's counter is the process's), each key or range a Txn
// names counted, found or not.
func etcdDeletes(t *testing.T, e *env) float64 {
	t.Helper()
	resp, err := http.Get(e.etcd.Members[0].ClientURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_mvcc_delete_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("etcd_mvcc_delete_total not found (%v)", sc.Err())
	return 0
}
