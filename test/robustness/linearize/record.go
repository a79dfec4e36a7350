package linearize

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

// Recorder records coordinator operations from any number of goroutines
// and clients, with invocation and response times on one monotonic clock.
type Recorder struct {
	start time.Time

	mu     sync.Mutex
	ops    []porcupine.Operation
	scopes []scopeOp           // CancelScope calls, projected per key at Check
	keys   map[string][]string // scope -> keys begun in it
	owner  map[string]string   // call id -> key, from Begin, Start and CreateTask replies
	// beginOf is the Begin that placed a call, for Start's calls, which
	// decisions may name by placement (record_start.go).
	beginOf map[string]string
	seen    map[string]bool // keys
	// Tasks (record_tasks.go): ListTasks calls, projected per task at
	// Check; the tasks created, by principal, in reply order; how many
	// CreateTasks named no task.
	lists     []listOp
	tasksOf   map[string][]createdTask
	anonymous int
}

type scopeOp struct {
	scope     string
	initiator string
	client    int
	call, ret int64
	unknown   bool
	ids       []string
}

// NewRecorder starts a recorder; its clock starts now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), keys: map[string][]string{}, owner: map[string]string{}, seen: map[string]bool{},
		beginOf: map[string]string{},
		tasksOf: map[string][]createdTask{}}
}

func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// pending marks the response time of an operation whose outcome is not
// known; Check moves it past the end of the history.
const pending = math.MaxInt64

type clientKey struct{}

// WithClient tags the operations issued with ctx as client n's (the row
// they are drawn on in the visualisation).
func WithClient(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, clientKey{}, n)
}

// Interceptor records every Begin, AbandonBegin, Cancel, Complete, Fail, GetCall,
// CancelScope and task RPC (CreateTask, GetTask, WaitTask, ListTasks,
// CancelTask, SetTaskInput, UpdateTask) that passes through it, as its
// client sees it; a Complete, Fail or Cancel that names its call by
// placement is marked so (Input.Placed). Start, a stream, is recorded by
// Recorder.Start. A read whose outcome is not known is left out: it
// changed nothing.
func (r *Recorder) Interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		in, ok := inputOf(req)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		client, _ := ctx.Value(clientKey{}).(int)
		call := r.now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		ret := r.now()
		switch q := req.(type) {
		case *pb.CancelScopeRequest:
			r.addScope(q, reply.(*pb.CancelScopeResponse), err, client, call, ret)
			return err
		case *pb.ListTasksRequest:
			r.addList(q, reply.(*pb.ListTasksResponse), err, client, call, ret)
			return err
		}
		out := outputOf(in, reply, err)
		if out.Unknown {
			if pureRead(in.Op) {
				return err
			}
			ret = pending
		}
		r.add(in, out, client, call, ret)
		return err
	}
}

func (r *Recorder) add(in Input, out Output, client int, call, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if in.Op == OpCreateTask {
		r.addTaskLocked(&in, out, ret)
	}
	r.placedLocked(&in)
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	begins := in.Op == OpBegin || in.Op == OpRetry || in.Op == OpStart
	if begins && !r.seen[in.Key] {
		r.seen[in.Key] = true
		scope, _, _ := strings.Cut(in.Key, "|")
		r.keys[scope] = append(r.keys[scope], in.Key)
	}
	if out.ID != "" && begins {
		r.owner[out.ID] = in.Key
	}
}

func (r *Recorder) addScope(req *pb.CancelScopeRequest, resp *pb.CancelScopeResponse, err error, client int, call, ret int64) {
	op := scopeOp{scope: req.GetScope(), initiator: coordinator.InitiatorName(req.GetInitiator()), client: client, call: call, ret: ret}
	if err != nil {
		op.unknown, op.ret = true, pending
	} else {
		op.ids = resp.GetCallIds()
	}
	r.mu.Lock()
	r.scopes = append(r.scopes, op)
	r.mu.Unlock()
}

// Key is a call key as the model names it.
func Key(k *pb.CallKey) string {
	id, _ := json.Marshal(requestID(k.GetRequestId()))
	return k.GetScope() + "|" + string(id)
}

func requestID(id *pb.RequestId) any {
	if t, ok := id.GetKind().(*pb.RequestId_Text); ok {
		return t.Text
	}
	return id.GetNumber()
}

// inputOf maps a request to the model's input; ok is false for the
// operations the model leaves out.
func inputOf(req any) (Input, bool) {
	switch q := req.(type) {
	case *pb.BeginRequest:
		if q.GetRetryOf() != "" {
			return Input{Op: OpRetry, Key: Key(q.GetKey()), ID: q.GetRetryOf(), BeginID: q.GetBeginId()}, true
		}
		return Input{Op: OpBegin, Key: Key(q.GetKey()), BeginID: q.GetBeginId()}, true
	case *pb.AbandonBeginRequest:
		return Input{Op: OpAbandon, Key: Key(q.GetKey()), BeginID: q.GetBeginId(),
			Initiator: coordinator.InitiatorName(q.GetInitiator()), Reason: q.GetReason()}, true
	case *pb.CancelRequest:
		ini := coordinator.InitiatorName(q.GetInitiator())
		if k := q.GetKey(); k != nil {
			return Input{Op: OpCancelKey, Key: Key(k), Initiator: ini, Reason: q.GetReason()}, true
		}
		return Input{Op: OpCancelRef, ID: q.GetCall().GetCallId(), Initiator: ini, Reason: q.GetReason(), Placed: namesPlacement(q.GetCall())}, true
	case *pb.CompleteRequest:
		return Input{Op: OpComplete, ID: q.GetCall().GetCallId(), Placed: namesPlacement(q.GetCall())}, true
	case *pb.FailRequest:
		return Input{Op: OpFail, ID: q.GetCall().GetCallId(), Initiator: coordinator.InitiatorName(q.GetInitiator()), Reason: q.GetReason(),
			Placed: namesPlacement(q.GetCall())}, true
	case *pb.GetCallRequest:
		if k := q.GetKey(); k != nil {
			return Input{Op: OpGetKey, Key: Key(k)}, true
		}
		return Input{Op: OpGetID, ID: q.GetCallId()}, true
	case *pb.CancelScopeRequest:
		return Input{Op: OpCancelScope}, true
	case *pb.ListTasksRequest:
		return Input{Op: OpListTask}, true
	}
	return taskInputOf(req)
}

// outputOf maps a reply, or an error, to the model's output. An error
// that does not prove the operation had no effect is an unknown outcome.
func outputOf(in Input, reply any, err error) Output {
	if err != nil && taskOp(in.Op) {
		return taskErrorOutput(in, err)
	}
	if err != nil {
		return errorOutput(in, err)
	}
	if o, ok := taskOutputOf(reply); ok {
		return o
	}
	switch p := reply.(type) {
	case *pb.BeginResponse:
		return Output{ID: p.GetCallId()}
	case *pb.CancelResponse:
		return Output{Result: strings.TrimPrefix(p.GetResult().String(), "CANCEL_RESULT_")}
	case *pb.CompleteResponse:
		return Output{Result: strings.TrimPrefix(p.GetResult().String(), "SETTLE_RESULT_")}
	case *pb.FailResponse:
		return Output{Result: strings.TrimPrefix(p.GetResult().String(), "SETTLE_RESULT_")}
	case *pb.AbandonBeginResponse:
		if !p.GetBegun() {
			return Output{Result: RNotBegun}
		}
		return Output{Result: strings.TrimPrefix(p.GetResult().String(), "SETTLE_RESULT_"), ID: p.GetCallId()}
	case *pb.GetCallResponse:
		c := p.GetCall()
		return Output{ID: c.GetCallId(), State: strings.ToLower(strings.TrimPrefix(c.GetState().String(), "CALL_STATE_"))}
	}
	return Output{Unknown: true}
}

// BeginOutcomeUnknown says a Begin's error leaves open whether it
// committed, as the model reads it: a workload abandons such a Begin, as
// a gateway does.
func BeginOutcomeUnknown(err error) bool {
	return err != nil && errorOutput(Input{Op: OpBegin}, err).Unknown
}

func errorOutput(in Input, err error) Output {
	reason := coordinator.ErrorReason(err)
	switch code := status.Code(err); {
	case reason == "DUPLICATE_REQUEST_ID":
		return Output{Result: RDuplicate}
	case reason == "NOT_RETRYABLE":
		return Output{Result: RNotRetryable}
	case reason == "BEGIN_ABANDONED":
		return Output{Result: RAbandoned}
	case reason == "UNKNOWN_CALL" || (code == codes.NotFound && in.Op != OpBegin && in.Op != OpRetry):
		return Output{Result: RNotFound}
	case code == codes.NotFound, code == codes.ResourceExhausted, code == codes.InvalidArgument:
		// No worker, no capacity, a bad request: nothing was written.
		return Output{Result: RRefused}
	case code == codes.FailedPrecondition:
		return Output{Result: "FAILED_PRECONDITION: " + reason} // fence or owner wrong: the model allows neither
	}
	return Output{Unknown: true} // unavailable, deadline, cancelled: it may have committed
}

// History returns the recorded operations, each CancelScope projected on
// every key of its scope (and on any task it named), each ListTasks on
// its tasks, and operations of unknown outcome ending after everything
// else. resolve maps a call id no Begin reply named (one whose reply was
// lost) to its key; it may be nil.
func (r *Recorder) History(resolve func(id string) (string, bool)) ([]porcupine.Operation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keyOf := func(id string) (string, bool) {
		if k, ok := r.owner[id]; ok {
			return k, true
		}
		if resolve != nil {
			return resolve(id)
		}
		return "", false
	}
	var out []porcupine.Operation
	var end int64
	for _, op := range r.ops {
		in := op.Input.(Input)
		if in.Key == "" {
			k, ok := keyOf(in.ID)
			if !ok {
				return nil, fmt.Errorf("linearize: %s names call %s, which no Begin placed", in.Op, in.ID)
			}
			in.Key = k
			op.Input = in
		}
		out = append(out, op)
		end = max(end, op.Call, notPending(op.Return))
	}
	for _, sc := range r.scopes {
		end = max(end, sc.call, notPending(sc.ret))
		byKey := map[string]string{}
		for _, id := range sc.ids {
			k, ok := keyOf(id)
			if !ok {
				return nil, fmt.Errorf("linearize: CancelScope(%s) cancelled call %s, which no Begin placed", sc.scope, id)
			}
			byKey[k] = id
		}
		for _, k := range r.keys[sc.scope] {
			o := Output{Unknown: sc.unknown, ID: byKey[k]}
			in := Input{Op: OpCancelScope, Key: k, Initiator: sc.initiator}
			out = append(out, porcupine.Operation{ClientId: sc.client, Input: in, Output: o, Call: sc.call, Return: sc.ret})
		}
		out = append(out, r.scopeTasksLocked(sc, byKey)...)
	}
	for _, l := range r.lists {
		end = max(end, l.call, l.ret)
	}
	out = append(out, r.listsLocked()...)
	for i := range out {
		if out[i].Return == pending {
			out[i].Return = end + 1
		}
	}
	return out, nil
}

func notPending(t int64) int64 {
	if t == pending {
		return 0
	}
	return t
}

// Len is how many operations were recorded (a CancelScope or a ListTasks
// counts once).
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops) + len(r.scopes) + len(r.lists)
}
