package coordinator_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/test/robustness/linearize"
)

// The task part of the linearizability workload: CreateTask (on the call
// keys the calls use, which a task must leave alone), GetTask (by its
// principal, by another, and naming a call that is no task), WaitTask,
// ListTasks, CancelTask, the worker's Complete, Fail, SetTaskInput (new
// requests, withdrawals, and keys used before, which are refused), the
// client's UpdateTask, and Cancel and GetCall of the task's call.

// linTaskTool is the task tool of the linearizability tests' workers.
const linTaskTool = "job"

// linPrincipals own the tasks; mallory owns none.
var linPrincipals = []string{"alice", "bob"}

// linTask is a task the workload created, and the input requests it
// asked of it (guarded by linEnv.mu).
type linTask struct {
	task      *pb.Task
	principal string
	inputs    linearize.TaskInputs
}

func (lt *linTask) id() string { return lt.task.GetTaskId() }

func (lt *linTask) ref() *pb.CallRef {
	return &pb.CallRef{CallId: lt.task.GetTaskId(), Fence: lt.task.GetFence(), Worker: lt.task.GetWorker()}
}

// oneTask issues one random task operation on cl.
func (l *linEnv) oneTask(ctx context.Context, r *rand.Rand, cl pb.CoordinatorServiceClient) {
	lt := l.pickTask(r)
	switch x := r.IntN(100); {
	case x < 18 || lt == nil:
		l.createTask(ctx, r, cl)
	case x < 33:
		cl.GetTask(ctx, &pb.GetTaskRequest{TaskId: lt.id(), Principal: l.asker(r, lt), WithResult: r.IntN(2) == 0})
	case x < 35:
		if b := l.pick(r, linearize.Key(l.keys[r.IntN(len(l.keys))])); b != nil {
			cl.GetTask(ctx, &pb.GetTaskRequest{TaskId: b.CallId, Principal: "alice"}) // a call, not a task: not found
		}
	case x < 39:
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond) // mostly unanswered: a read, left out
		defer cancel()
		cl.WaitTask(wctx, &pb.WaitTaskRequest{TaskId: lt.id(), Principal: lt.principal})
	case x < 43:
		cl.ListTasks(ctx, &pb.ListTasksRequest{Principal: linPrincipals[r.IntN(len(linPrincipals))], PageSize: 100})
	case x < 55:
		cl.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: lt.id(), Principal: l.asker(r, lt)})
	case x < 66:
		cl.Complete(ctx, &pb.CompleteRequest{Call: lt.ref(), TaskResultJson: []byte(`{"content":[{"type":"text","text":"done"}]}`)})
	case x < 72:
		ini := pb.Initiator_INITIATOR_TOOL
		if r.IntN(2) == 0 {
			ini = pb.Initiator_INITIATOR_WORKER_LOST
		}
		cl.Fail(ctx, &pb.FailRequest{Call: lt.ref(), Initiator: ini})
	case x < 75:
		cl.Cancel(ctx, &pb.CancelRequest{Target: &pb.CancelRequest_Call{Call: lt.ref()}, Initiator: pb.Initiator_INITIATOR_TIMEOUT})
	case x < 78:
		cl.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: lt.id()}})
	case x < 90:
		cl.SetTaskInput(ctx, l.inputRequest(r, lt))
	default:
		cl.UpdateTask(ctx, &pb.UpdateTaskRequest{TaskId: lt.id(), Principal: l.asker(r, lt), InputResponses: l.answers(r, lt)})
	}
	// every outcome, errors too, is in the recorder's history
}

func (l *linEnv) createTask(ctx context.Context, r *rand.Rand, cl pb.CoordinatorServiceClient) {
	p := linPrincipals[r.IntN(len(linPrincipals))]
	resp, err := cl.CreateTask(ctx, &pb.CreateTaskRequest{Key: l.keys[r.IntN(len(l.keys))], Tool: linTaskTool,
		Principal: p, Gateway: "g1", Ttl: durationpb.New(time.Hour)})
	if err == nil {
		l.mu.Lock()
		l.tasks = append(l.tasks, &linTask{task: resp.GetTask(), principal: p})
		l.mu.Unlock()
	}
}

// asker is the task's principal, now and then another.
func (l *linEnv) asker(r *rand.Rand, lt *linTask) string {
	if r.IntN(10) == 0 {
		return "mallory"
	}
	return lt.principal
}

// inputRequest asks a new input request of the task (see
// linearize.TaskInputs).
func (l *linEnv) inputRequest(r *rand.Rand, lt *linTask) *pb.SetTaskInputRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return lt.inputs.Request(r, lt.ref())
}

// answers answers some of the requests asked of the task.
func (l *linEnv) answers(r *rand.Rand, lt *linTask) map[string][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return lt.inputs.Answers(r)
}

// pickTask returns a task the workload created (mostly a recent one), or
// nil.
func (l *linEnv) pickTask(r *rand.Rand) *linTask {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.tasks)
	switch {
	case n == 0:
		return nil
	case r.IntN(5) == 0:
		return l.tasks[r.IntN(n)]
	}
	return l.tasks[n-1-r.IntN(min(n, 6))]
}

// TestLinearizableCatchesALyingTaskReplica: one replica is broken on
// purpose, in the test's own gRPC server around the real coordinator: it
// answers GetTask and ListTasks from its memory of each task as it first
// served it (its creation, or a first read), whatever etcd holds now: a
// status served from a cache never refreshed. Every decision in etcd stays right; the
// model check must not pass.
func TestLinearizableCatchesALyingTaskReplica(t *testing.T) {
	var lies atomic.Int64
	l := newLinEnv(t, linOptions{broken: staleTask(&lies), taskShare: 100})
	for round := 1; ; round++ {
		l.run(t, 300, nil)
		r := l.check(t)
		if r.Result == porcupine.Illegal && r.Visualisation != "" {
			t.Logf("caught after %d stale task reads", lies.Load())
			os.RemoveAll(filepath.Dir(r.Visualisation)) // the violation this test wants
			return
		}
		if round == 5 {
			t.Fatalf("after %d stale task reads, the lying replica was not caught: %v", lies.Load(), r)
		}
	}
}

// staleTask is the broken replica's lie (see
// TestLinearizableCatchesALyingTaskReplica), in GetTask and ListTasks;
// lies counts the tasks it answered with as they no longer were.
func staleTask(lies *atomic.Int64) func() grpc.UnaryServerInterceptor {
	return func() grpc.UnaryServerInterceptor {
		var mu sync.Mutex
		cached := map[string]*pb.Task{} // by principal and task id
		stale := func(principal string, now *pb.Task) *pb.Task {
			k := principal + "/" + now.GetTaskId()
			was := cached[k]
			switch {
			case was == nil:
				cached[k] = proto.CloneOf(now)
				return now
			case was.GetStatus() != now.GetStatus() || len(was.GetInputRequests()) != len(now.GetInputRequests()):
				lies.Add(1)
			}
			return proto.CloneOf(was)
		}
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			resp, err := handler(ctx, req)
			if err != nil {
				return resp, err
			}
			mu.Lock()
			defer mu.Unlock()
			switch q := req.(type) {
			case *pb.CreateTaskRequest:
				stale(q.GetPrincipal(), resp.(*pb.CreateTaskResponse).GetTask())
			case *pb.GetTaskRequest:
				return &pb.GetTaskResponse{Task: stale(q.GetPrincipal(), resp.(*pb.GetTaskResponse).GetTask())}, nil
			case *pb.ListTasksRequest:
				list := resp.(*pb.ListTasksResponse)
				for i, t := range list.GetTasks() {
					list.Tasks[i] = stale(q.GetPrincipal(), t)
				}
			}
			return resp, nil
		}
	}
}
