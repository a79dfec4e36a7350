package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/randid"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/test/robustness/linearize"
	"github.com/mcpcancel/mcpcancel/worker"
)

// TestLinearizable issues Begin, retry Begin, Cancel (by key and by
// reference), Complete, Fail, GetCall and CancelScope, and the task RPCs
// (linearizable_tasks_test.go) from concurrent clients through real gRPC
// to three coordinator replicas, each on its own member of a 3-member
// etcd, records what every client saw with a client interceptor, stops
// one replica mid-run (its operations in flight have unknown outcomes, as
// do those that time out), and checks the history for linearizability
// against the models of a call key and of a task.
func TestLinearizable(t *testing.T) {
	began := time.Now()
	l := newLinEnv(t, linOptions{taskShare: 30})
	t.Logf("cluster up in %v", time.Since(began))
	began = time.Now()
	defer func() { t.Logf("operations took %v", time.Since(began)) }()
	l.run(t, 1600, func(done int) {
		if done == 800 {
			l.replicas[2].stop() // its operations in flight end unknown
		}
	})
	r := l.check(t)
	if r.Result != porcupine.Ok {
		t.Fatalf("not linearizable: %v", r)
	}
	if r.Partitions < len(l.keys) || r.Operations < 1600 || r.TaskOperations < 300 || r.Tasks < 50 {
		t.Fatalf("checked too little: %v", r)
	}
}

// TestLinearizableCatchesALyingReplica: one replica is broken on purpose,
// in the test's own gRPC server around the real coordinator: it answers a
// Cancel by key for a call it began itself from its own memory, CANCELLED,
// whatever the decision in etcd (a cancel served from a stale cache
// without the fence). Every call still has exactly one decision record,
// so the invariant checks pass; the model check must not.
func TestLinearizableCatchesALyingReplica(t *testing.T) {
	l := newLinEnv(t, linOptions{broken: staleCancel})
	l.run(t, 600, nil)
	for id, as := range auditsFrom(t, l.cli) {
		if n := len(decisions(as)); n != 1 {
			t.Fatalf("call %s has %d decision records; the lie should leave etcd right", id, n)
		}
	}
	r := l.check(t)
	if r.Result != porcupine.Illegal || r.Visualisation == "" {
		t.Fatalf("the lying replica was not caught: %v", r)
	}
	os.RemoveAll(filepath.Dir(r.Visualisation)) // the violation this test wants
}

func decisions(as []*coordinator.AuditRecord) []string {
	var out []string
	for _, o := range outcomes(as) {
		if o != "cancel_lost" {
			out = append(out, o)
		}
	}
	return out
}

// staleCancel is the broken replica's lie (see
// TestLinearizableCatchesALyingReplica).
func staleCancel() grpc.UnaryServerInterceptor {
	var mu sync.Mutex
	begun := map[string]bool{}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		mu.Lock()
		defer mu.Unlock()
		switch q := req.(type) {
		case *pb.BeginRequest:
			if err == nil {
				begun[linearize.Key(q.GetKey())] = true
			}
		case *pb.CancelRequest:
			if k := q.GetKey(); k != nil && err == nil && begun[linearize.Key(k)] {
				resp.(*pb.CancelResponse).Result = pb.CancelResult_CANCEL_RESULT_CANCELLED
			}
		}
		return resp, err
	}
}

// linEnv is the test's cluster: three replicas, two workers offering the
// idempotent tool (so lost calls may be retried) and a task tool, and a
// client per replica whose operations are recorded.
type linEnv struct {
	cli       *clientv3.Client
	replicas  []*linReplica
	rec       *linearize.Recorder
	keys      []*pb.CallKey
	scopes    []string
	taskShare int // percent of the operations that are task RPCs

	mu    sync.Mutex
	calls map[string][]*pb.BeginResponse // by model key, oldest first
	tasks []*linTask                     // oldest first
}

// linOptions shape a linEnv.
type linOptions struct {
	// broken, if set, wraps replica 1's real coordinator.
	broken    func() grpc.UnaryServerInterceptor
	taskShare int
}

func newLinEnv(t *testing.T, o linOptions) *linEnv {
	etcd := etcdtest.Start(t, 3, etcdtest.Options{})
	l := &linEnv{cli: etcd.Client(), rec: linearize.NewRecorder(), calls: map[string][]*pb.BeginResponse{}, taskShare: o.taskShare}
	for i, ep := range etcd.Endpoints() {
		var icpt func() grpc.UnaryServerInterceptor
		if i == 1 {
			icpt = o.broken
		}
		l.replicas = append(l.replicas, startReplica(t, ep, fmt.Sprintf("r%d", i), icpt, l.rec))
	}
	// The workers attach to the replicas that stay up: a re-attach would
	// let the janitor fail their calls, a decision nobody recorded.
	target := l.replicas[0].addr + "," + l.replicas[1].addr
	for _, name := range []string{"w1", "w2"} {
		testcluster.StartWorker(t, worker.Options{Coordinator: target, Name: name}, func(w *worker.Worker) {
			w.Handle(worker.Tool{Name: "work", Idempotent: true}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
				return worker.Text("done"), nil
			})
			w.Handle(worker.Tool{Name: linTaskTool, TaskSupport: worker.TaskOptional}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
				return worker.Text("done"), nil // never run: the test plays the worker's part
			})
		})
	}
	for _, r := range l.replicas {
		waitTools(t, r.client, "work")
		waitTools(t, r.client, linTaskTool)
	}
	for s := range 2 {
		l.scopes = append(l.scopes, fmt.Sprintf("conn:lin%d", s))
		for i := range 5 {
			l.keys = append(l.keys, key(l.scopes[s], num(int64(i))))
		}
	}
	return l
}

// linReplica is a coordinator replica on its own etcd member, and a
// recorded client to it.
type linReplica struct {
	addr     string
	client   pb.CoordinatorServiceClient
	stopOnce sync.Once
	stop     func()
	stopped  chan struct{}
}

func startReplica(t *testing.T, endpoint, name string, broken func() grpc.UnaryServerInterceptor, rec *linearize.Recorder) *linReplica {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if broken != nil {
		opts = append(opts, grpc.UnaryInterceptor(broken()))
	}
	srv := coordinator.New(coordinator.Options{Client: cli, Name: name, Tasks: coordinator.TaskOptions{MaxPerPrincipal: 100000}})
	gs := testcluster.GRPCServer(opts...)
	pb.RegisterCoordinatorServiceServer(gs, srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { srv.Run(ctx); done <- struct{}{} }()
	go func() { gs.Serve(lis); done <- struct{}{} }()
	r := &linReplica{addr: lis.Addr().String(), stopped: make(chan struct{})}
	r.stop = func() {
		r.stopOnce.Do(func() {
			gs.Stop()
			cancel()
			<-done
			<-done
			cli.Close()
			close(r.stopped)
		})
	}
	t.Cleanup(r.stop)
	select {
	case <-srv.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("replica not ready")
	}
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(rec.Interceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.client = pb.NewCoordinatorServiceClient(conn)
	return r
}

func (r *linReplica) up() bool {
	select {
	case <-r.stopped:
		return false
	default:
		return true
	}
}

// run has 12 clients issue n operations in all on the keys, at random;
// after each, progress is told how many are done.
func (l *linEnv) run(t *testing.T, n int, progress func(done int)) {
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	for c := range 12 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(c)))
			for {
				mu.Lock()
				if done >= n || t.Failed() {
					mu.Unlock()
					return
				}
				done++
				d := done
				mu.Unlock()
				if progress != nil {
					progress(d)
				}
				l.one(t, r, c)
			}
		})
	}
	wg.Wait()
}

// one issues one random operation as client c.
func (l *linEnv) one(t *testing.T, r *rand.Rand, c int) {
	var live []*linReplica
	for _, rp := range l.replicas {
		if rp.up() {
			live = append(live, rp)
		}
	}
	cl := live[r.IntN(len(live))].client
	timeout := 3 * time.Second
	if r.IntN(20) == 0 {
		timeout = time.Duration(r.Int64N(int64(3 * time.Millisecond))) // it may commit, unanswered
	}
	ctx, cancel := context.WithTimeout(linearize.WithClient(t.Context(), c), timeout)
	defer cancel()
	if r.IntN(100) < l.taskShare {
		l.oneTask(ctx, r, cl)
		return
	}
	k := l.keys[r.IntN(len(l.keys))]
	mk := linearize.Key(k)
	b := l.pick(r, mk)
	var err error
	switch x := r.IntN(100); {
	case x < 22 || b == nil:
		l.begin(ctx, r, cl, live, k, "")
	case x < 27:
		l.begin(ctx, r, cl, live, k, b.CallId)
	case x < 45:
		_, err = cl.Cancel(ctx, &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT})
	case x < 50:
		_, err = cl.Cancel(ctx, &pb.CancelRequest{Target: &pb.CancelRequest_Call{Call: ref(b)}, Initiator: pb.Initiator_INITIATOR_TIMEOUT})
	case x < 67:
		_, err = cl.Complete(ctx, &pb.CompleteRequest{Call: ref(b)})
	case x < 77:
		ini := pb.Initiator_INITIATOR_WORKER_LOST
		if r.IntN(3) == 0 {
			ini = pb.Initiator_INITIATOR_TOOL
		}
		_, err = cl.Fail(ctx, &pb.FailRequest{Call: ref(b), Initiator: ini})
	case x < 88:
		_, err = cl.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{Key: k}})
	case x < 96:
		_, err = cl.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: b.CallId}})
	default:
		_, err = cl.CancelScope(ctx, &pb.CancelScopeRequest{Scope: k.Scope, Initiator: pb.Initiator_INITIATOR_DISCONNECT})
	}
	_ = err // every outcome, errors too, is in the recorder's history
}

// begin places a call. Half the Begins are named, and a named one whose
// outcome is unknown (mostly one given under 3 ms) is abandoned at once
// through any live replica, as a gateway abandons a Begin whose reply it
// lost: the Begin may still be in its replica's commit batch.
func (l *linEnv) begin(ctx context.Context, r *rand.Rand, cl pb.CoordinatorServiceClient, live []*linReplica, k *pb.CallKey, retryOf string) {
	req := l.beginRequest(k, retryOf)
	if r.IntN(2) == 0 {
		req.BeginId = randid.New(16)
	}
	resp, err := cl.Begin(ctx, req)
	if err == nil {
		l.began(linearize.Key(k), resp)
		return
	}
	if req.BeginId == "" || !linearize.BeginOutcomeUnknown(err) {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	live[r.IntN(len(live))].client.AbandonBegin(actx, &pb.AbandonBeginRequest{Key: k, BeginId: req.BeginId,
		Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "the reply was lost"})
}

func (l *linEnv) beginRequest(k *pb.CallKey, retryOf string) *pb.BeginRequest {
	return &pb.BeginRequest{Key: k, Tool: "work", Principal: "alice", Gateway: "g1", RetryOf: retryOf,
		Timeout: durationpb.New(time.Minute)}
}

func ref(b *pb.BeginResponse) *pb.CallRef {
	return &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}
}

func (l *linEnv) began(mk string, b *pb.BeginResponse) {
	l.mu.Lock()
	l.calls[mk] = append(l.calls[mk], b)
	l.mu.Unlock()
}

// pick returns a call placed under the key (mostly the latest), or nil.
func (l *linEnv) pick(r *rand.Rand, mk string) *pb.BeginResponse {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := l.calls[mk]
	switch {
	case len(cs) == 0:
		return nil
	case r.IntN(5) == 0:
		return cs[r.IntN(len(cs))]
	}
	return cs[len(cs)-1]
}

// check checks the history, writing the visualisation under the test's
// temp dir (kept, with its path in the log, on failure) and logs the
// figures.
func (l *linEnv) check(t *testing.T) linearize.Report {
	t.Helper()
	h, err := l.rec.History(l.resolve(t))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "linearizable-")
	if err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(dir, t.Name()+".html")
	r, err := linearize.Check(linearize.Options{}, h, time.Minute, html)
	if err != nil {
		t.Fatal(err)
	}
	if r.Visualisation == "" {
		os.RemoveAll(dir)
	}
	results, kinds := map[string]int{}, map[string]int{}
	for _, op := range h {
		kinds[op.Input.(linearize.Input).Op]++
		o := op.Output.(linearize.Output)
		switch {
		case o.Unknown:
			results["unknown"]++
		case o.Result != "":
			results[o.Result]++
		}
	}
	t.Logf("%v; operations %v; outcomes %v", r, kinds, results)
	return r
}

// resolve maps the id of a call whose Begin reply was lost to its key,
// from etcd: only to place the operations that name it, never to decide.
func (l *linEnv) resolve(t *testing.T) func(string) (string, bool) {
	return func(id string) (string, bool) {
		resp, err := l.cli.Get(context.Background(), prefix+"calls/"+id)
		if err != nil || len(resp.Kvs) == 0 {
			return "", false
		}
		var rec struct {
			Scope     string `json:"scope"`
			RequestID int64  `json:"request_id"`
		}
		if json.Unmarshal(resp.Kvs[0].Value, &rec) != nil {
			return "", false
		}
		return linearize.Key(key(rec.Scope, num(rec.RequestID))), true
	}
}
