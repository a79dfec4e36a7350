package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
	"github.com/mcpcancel/mcpcancel/test/robustness/linearize"
)

// operator is the harness's own coordinator client, for the model check
// (issue 22): two loops issue Begin (half of them named, and abandoned
// when their outcome is unknown, as a gateway does), Start (start.go:
// decisions by placement and AbandonBegin racing its Begin), retry Begin,
// AbandonBegin, Cancel by key and by reference, Complete and Fail (as the
// call's worker would), GetCall and CancelScope on scopes of their own,
// and a third the task RPCs (below),
// through both coordinators while the faults run, and a client
// interceptor records every operation as the operator saw it. The
// gateways and workers are separate processes the harness cannot record
// from inside; their decisions reach the operator's calls and tasks only
// as the janitor's (a lost worker, a call past its deadline), which the
// model allows at any moment.
type operator struct {
	rec     *linearize.Recorder
	conns   []*grpc.ClientConn
	clients []pb.CoordinatorServiceClient
	start   time.Time  // epochs count from here
	gate    *coordGate // which coordinators run this tree (upgrade.go)

	// late lets decisions by placement come past the call's deadline.
	late bool

	mu    sync.Mutex
	calls map[string][]*pb.BeginResponse // by model key, oldest first
	named map[string]string              // by model key: its latest named Begin's begin_id
	tasks []*opTask                      // the latest created, oldest first
}

// operatorPrincipal owns the operator's calls; the client checks skip
// them (no MCP client made them).
const operatorPrincipal = "operator"

func newOperator(c *Cluster, late bool) (*operator, error) {
	op := &operator{rec: linearize.NewRecorder(), calls: map[string][]*pb.BeginResponse{}, named: map[string]string{}, late: late,
		gate: &c.gate}
	for _, a := range c.coordAddr {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(op.rec.Interceptor()))
		if err != nil {
			op.close()
			return nil, err
		}
		op.conns = append(op.conns, cc)
		op.clients = append(op.clients, pb.NewCoordinatorServiceClient(cc))
	}
	op.start = time.Now()
	return op, nil
}

// keyEpoch is how long the operator works on one set of keys before it
// moves to fresh ones. An operation of unknown outcome (it timed out in a
// fault) may take effect at any later time, so the checker must try it
// everywhere after it in its key's history: over a 30-minute soak on the
// same 24 keys that search outgrew its 2 minutes (result Unknown, 439
// such operations in 45,658). Calls are independent per key, so checking
// each key apart is exact, and fresh keys keep each history short.
const keyEpoch = 30 * time.Second

// opScopes and opKeysPerScope shape an epoch's keys: 4 scopes of 6.
const opScopes, opKeysPerScope = 4, 6

// epoch is the current key epoch.
func (op *operator) epoch() int { return int(time.Since(op.start) / keyEpoch) }

// keysOf lists epoch e's keys.
func keysOf(e int) []*pb.CallKey {
	var out []*pb.CallKey
	for s := range opScopes {
		for i := range opKeysPerScope {
			out = append(out, &pb.CallKey{Scope: fmt.Sprintf("conn:operator-%d-%d", e, s),
				RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: int64(i)}}})
		}
	}
	return out
}

func (op *operator) close() {
	for _, cc := range op.conns {
		cc.Close()
	}
}

// run issues operations until ctx ends, about 50 a second in all on
// calls and 10 on tasks. The task loop is one: no two of its operations
// overlap, which the model's reading of a task's expiry needs (see
// package linearize, tasks.go).
func (op *operator) run(ctx context.Context, seed int64) {
	var wg sync.WaitGroup
	for n := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(0x09e7+n)))
			for ctx.Err() == nil {
				op.one(linearize.WithClient(context.WithoutCancel(ctx), n), r)
				pace(ctx, time.Duration(20+r.IntN(40))*time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(uint64(seed), 0x7a5c09e7))
		for ctx.Err() == nil {
			op.oneTask(linearize.WithClient(context.WithoutCancel(ctx), 2), r)
			pace(ctx, time.Duration(60+r.IntN(80))*time.Millisecond)
		}
	})
	wg.Wait()
}

func (op *operator) one(ctx context.Context, r *rand.Rand) {
	cur, done := op.gate.current()
	defer done()
	i := r.IntN(len(op.clients))
	cl := op.clients[i]
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	keys := keysOf(op.epoch())
	k := keys[r.IntN(len(keys))]
	mk := linearize.Key(k)
	b := op.pick(r, mk)
	x := r.IntN(100)
	// Start and decisions by placement go to this tree's coordinators.
	if b != nil && (x >= 12 && x < 25 || x >= 45 && x < 73 && b.GetFence() == 0) {
		if !slices.Contains(cur, i) {
			if len(cur) == 0 {
				return
			}
			cl = op.clients[cur[r.IntN(len(cur))]]
		}
	}
	switch {
	case x < 12 || b == nil:
		op.begin(ctx, r, cl, mk, op.beginRequest(k, ""))
	case x < 25:
		op.startCall(ctx, r, cl, op.thisTree(cur), k)
	case x < 30:
		op.begin(ctx, r, cl, mk, op.beginRequest(k, b.CallId))
	case x < 45:
		cl.Cancel(ctx, &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_OPERATOR})
	case x < 50:
		cl.Cancel(ctx, &pb.CancelRequest{Target: &pb.CancelRequest_Call{Call: callRef(b)}, Initiator: pb.Initiator_INITIATOR_TIMEOUT})
	case x < 65:
		cl.Complete(ctx, &pb.CompleteRequest{Call: callRef(b), StoppedAt: nil})
	case x < 73:
		ini := pb.Initiator_INITIATOR_WORKER_LOST
		if r.IntN(3) == 0 {
			ini = pb.Initiator_INITIATOR_TOOL
		}
		cl.Fail(ctx, &pb.FailRequest{Call: callRef(b), Initiator: ini})
	case x < 86:
		cl.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{Key: k}})
	case x < 96:
		cl.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: b.CallId}})
	case x < 98:
		cl.CancelScope(ctx, &pb.CancelScopeRequest{Scope: k.Scope, Initiator: pb.Initiator_INITIATOR_OPERATOR})
	default:
		// Abandon the key's latest named Begin, whatever became of it
		// (mostly it was answered, and its call is failed if it runs).
		op.mu.Lock()
		id := op.named[mk]
		op.mu.Unlock()
		if id != "" {
			cl.AbandonBegin(ctx, abandonRequest(k, id))
		}
	}
}

// finish cancels every call the operator left running in the last two
// epochs, and its latest tasks (recorded like the rest), so that settling
// does not wait for their deadlines; older ones are past them
// (callTimeout < keyEpoch, and the coordinators cap a task's TTL below
// the call timeout).
func (op *operator) finish(ctx context.Context) {
	op.finishTasks(ctx)
	e := op.epoch()
	keys := keysOf(e)
	if e > 0 {
		keys = append(keysOf(e-1), keys...)
	}
	for _, k := range keys {
		for try := 0; try < 5 && ctx.Err() == nil; try++ {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := op.clients[try%len(op.clients)].Cancel(cctx, &pb.CancelRequest{
				Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_OPERATOR})
			cancel()
			if err == nil {
				break
			}
		}
	}
}

func (op *operator) beginRequest(k *pb.CallKey, retryOf string) *pb.BeginRequest {
	return &pb.BeginRequest{Key: k, Tool: "sleep", Principal: operatorPrincipal, Gateway: operatorPrincipal,
		RetryOf: retryOf, Timeout: durationpb.New(callTimeout)}
}

// begin places a call; half its Begins are named, and one of those whose
// outcome is unknown is abandoned, as a gateway abandons a Begin whose
// reply it lost, on the other coordinator when there are two.
func (op *operator) begin(ctx context.Context, r *rand.Rand, cl pb.CoordinatorServiceClient, mk string, req *pb.BeginRequest) {
	if r.IntN(2) == 0 {
		req.BeginId = randid.New(16)
		op.mu.Lock()
		op.named[mk] = req.BeginId
		op.mu.Unlock()
	}
	b, err := cl.Begin(ctx, req)
	if err == nil {
		op.mu.Lock()
		op.calls[mk] = append(op.calls[mk], b)
		op.mu.Unlock()
		return
	}
	if req.BeginId == "" || !linearize.BeginOutcomeUnknown(err) {
		return
	}
	op.abandon(ctx, r, req.Key, req.BeginId)
}

func abandonRequest(k *pb.CallKey, beginID string) *pb.AbandonBeginRequest {
	return &pb.AbandonBeginRequest{Key: k, BeginId: beginID, Initiator: pb.Initiator_INITIATOR_DISCONNECT,
		Reason: "the operator lost Begin's reply"}
}

// callRef names b's call: by fence, or by placement while its fence is
// not known (a Start not answered begun, or answered settled).
func callRef(b *pb.BeginResponse) *pb.CallRef {
	ref := &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}
	if b.Fence == 0 {
		ref.Placement = b.Placement
	}
	return ref
}

// pick returns a call placed under the key (mostly the latest), or nil.
// Unless late, a call known only by placement is not picked past its
// deadline (see decidable).
func (op *operator) pick(r *rand.Rand, mk string) *pb.BeginResponse {
	op.mu.Lock()
	defer op.mu.Unlock()
	cs := slices.DeleteFunc(slices.Clone(op.calls[mk]), func(b *pb.BeginResponse) bool { return !op.decidable(b) })
	switch {
	case len(cs) == 0:
		return nil
	case r.IntN(5) == 0:
		return cs[r.IntN(len(cs))]
	}
	return cs[len(cs)-1]
}

// check model-checks the operator's history. A call id no Begin reply
// named is placed under its key from what etcd held (only to place the
// operations that name it). The visualisation, on failure, goes to dir.
func (op *operator) check(server map[string]*ServerCall, dir string) (linearize.Report, error) {
	h, err := op.rec.History(func(id string) (string, bool) {
		s := server[id]
		if s == nil {
			return "", false
		}
		return s.Scope + "|" + compactID(s.RequestID), true
	})
	if err != nil {
		return linearize.Report{}, err
	}
	r, err := linearize.Check(linearize.Options{Janitor: true, Retention: true}, h, 2*time.Minute, filepath.Join(dir, "linearizability.html"))
	if err == nil && r.Result != porcupine.Ok {
		err = linearize.WriteHistory(h, filepath.Join(dir, "linearizability.json"))
	}
	return r, err
}

// The operator's tasks: CreateTask of the fixtures' task tool on the
// epoch's call keys (which a task must leave alone), as principal
// operator; GetTask (by operator, and by a stranger, who finds nothing),
// WaitTask, ListTasks, CancelTask, the worker's Complete, Fail and
// SetTaskInput (new requests, withdrawals, and keys used before, which
// are refused), the client's UpdateTask, and Cancel and GetCall of the
// task's call. The workers never see these tasks' calls run (no gateway
// executes them): only the operator and the janitor decide them. Their
// TTL, capped by the coordinators at the longest call timeout, runs out
// within the run, so the model checks expiry too.

// opStranger asks for the operator's tasks and must find none.
const opStranger = "operator-stranger"

// opTasksKept is how many of its latest tasks the operator works on.
const opTasksKept = 8

// opTask is a task the operator created, and the input requests it
// asked of it (guarded by operator.mu).
type opTask struct {
	task   *pb.Task
	inputs linearize.TaskInputs
}

func (t *opTask) ref() *pb.CallRef {
	return &pb.CallRef{CallId: t.task.GetTaskId(), Fence: t.task.GetFence(), Worker: t.task.GetWorker()}
}

// oneTask issues one random task operation.
func (op *operator) oneTask(ctx context.Context, r *rand.Rand) {
	cl := op.clients[r.IntN(len(op.clients))]
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	t := op.pickTask(r)
	switch x := r.IntN(100); {
	case x < 20 || t == nil:
		op.createTask(ctx, r, cl)
	case x < 38:
		cl.GetTask(ctx, &pb.GetTaskRequest{TaskId: t.task.GetTaskId(), Principal: asker(r), WithResult: r.IntN(2) == 0})
	case x < 41:
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // mostly unanswered: a read, left out
		defer cancel()
		cl.WaitTask(wctx, &pb.WaitTaskRequest{TaskId: t.task.GetTaskId(), Principal: operatorPrincipal})
	case x < 44:
		cl.ListTasks(ctx, &pb.ListTasksRequest{Principal: operatorPrincipal, PageSize: 100})
	case x < 56:
		cl.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: t.task.GetTaskId(), Principal: asker(r)})
	case x < 68:
		cl.Complete(ctx, &pb.CompleteRequest{Call: t.ref(), TaskResultJson: []byte(`{"content":[{"type":"text","text":"operator"}]}`)})
	case x < 74:
		ini := pb.Initiator_INITIATOR_TOOL
		if r.IntN(2) == 0 {
			ini = pb.Initiator_INITIATOR_WORKER_LOST
		}
		cl.Fail(ctx, &pb.FailRequest{Call: t.ref(), Initiator: ini})
	case x < 77:
		cl.Cancel(ctx, &pb.CancelRequest{Target: &pb.CancelRequest_Call{Call: t.ref()}, Initiator: pb.Initiator_INITIATOR_TIMEOUT})
	case x < 80:
		cl.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: t.task.GetTaskId()}})
	case x < 91:
		cl.SetTaskInput(ctx, op.inputRequest(r, t))
	default:
		cl.UpdateTask(ctx, &pb.UpdateTaskRequest{TaskId: t.task.GetTaskId(), Principal: asker(r), InputResponses: op.answers(r, t)})
	}
}

func (op *operator) createTask(ctx context.Context, r *rand.Rand, cl pb.CoordinatorServiceClient) {
	keys := keysOf(op.epoch())
	resp, err := cl.CreateTask(ctx, &pb.CreateTaskRequest{Key: keys[r.IntN(len(keys))], Tool: taskTool,
		Principal: operatorPrincipal, Gateway: operatorPrincipal, Ttl: durationpb.New(taskTTL)})
	if err != nil {
		return
	}
	op.mu.Lock()
	op.tasks = append(op.tasks, &opTask{task: resp.GetTask()})
	if n := len(op.tasks); n > opTasksKept {
		op.tasks = slices.Delete(op.tasks, 0, n-opTasksKept)
	}
	op.mu.Unlock()
}

// asker is the operator, now and then a stranger.
func asker(r *rand.Rand) string {
	if r.IntN(10) == 0 {
		return opStranger
	}
	return operatorPrincipal
}

// pickTask returns one of the latest tasks (mostly the newest), or nil.
func (op *operator) pickTask(r *rand.Rand) *opTask {
	op.mu.Lock()
	defer op.mu.Unlock()
	n := len(op.tasks)
	if n == 0 {
		return nil
	}
	return op.tasks[n-1-r.IntN(min(n, 1+r.IntN(opTasksKept)))]
}

// inputRequest asks a new input request of the task (see
// linearize.TaskInputs).
func (op *operator) inputRequest(r *rand.Rand, t *opTask) *pb.SetTaskInputRequest {
	op.mu.Lock()
	defer op.mu.Unlock()
	return t.inputs.Request(r, t.ref())
}

// answers answers some of the requests asked of the task.
func (op *operator) answers(r *rand.Rand, t *opTask) map[string][]byte {
	op.mu.Lock()
	defer op.mu.Unlock()
	return t.inputs.Answers(r)
}

// finishTasks cancels the operator's latest tasks, one after another.
func (op *operator) finishTasks(ctx context.Context) {
	op.mu.Lock()
	tasks := slices.Clone(op.tasks)
	op.mu.Unlock()
	for i, t := range tasks {
		cctx, cancel := context.WithTimeout(linearize.WithClient(ctx, 2), 3*time.Second)
		op.clients[i%len(op.clients)].CancelTask(cctx, &pb.CancelTaskRequest{TaskId: t.task.GetTaskId(), Principal: operatorPrincipal})
		cancel()
	}
}
