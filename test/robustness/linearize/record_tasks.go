package linearize

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

// projected bounds how many of a principal's earlier tasks a ListTasks
// that left them out is projected on: the latest ones. Leaving a read out
// of a history is always sound; the bound keeps the history linear in the
// operations.
const projected = 32

// createdTask is a task a CreateTask reply named.
type createdTask struct {
	key string
	ret int64
}

// listOp is a ListTasks call, projected per task at History.
type listOp struct {
	principal string
	client    int
	call, ret int64
	complete  bool // it listed every task of the principal
	listed    map[string]Output
}

// taskInputOf maps a task request to the model's input.
func taskInputOf(req any) (Input, bool) {
	switch q := req.(type) {
	case *pb.CreateTaskRequest:
		return Input{Op: OpCreateTask, Principal: q.GetPrincipal()}, true // keyed by its reply
	case *pb.GetTaskRequest:
		return Input{Op: OpGetTask, Key: TaskKey(q.GetTaskId()), ID: q.GetTaskId(), Principal: q.GetPrincipal()}, true
	case *pb.WaitTaskRequest:
		return Input{Op: OpWaitTask, Key: TaskKey(q.GetTaskId()), ID: q.GetTaskId(), Principal: q.GetPrincipal()}, true
	case *pb.CancelTaskRequest:
		reason := coordinator.SanitizeReason(q.GetReason())
		if reason == "" {
			reason = TaskReason
		}
		return Input{Op: OpCancelTask, Key: TaskKey(q.GetTaskId()), ID: q.GetTaskId(), Principal: q.GetPrincipal(),
			Initiator: TaskInitiator, Reason: reason}, true
	case *pb.SetTaskInputRequest:
		var ask []string
		for _, a := range q.GetAsk() {
			ask = append(ask, a.GetKey())
		}
		return Input{Op: OpSetInput, ID: q.GetCall().GetCallId(), Keys: keySet(ask), Withdraw: keySet(q.GetWithdraw())}, true
	case *pb.UpdateTaskRequest:
		return Input{Op: OpUpdateTask, Key: TaskKey(q.GetTaskId()), ID: q.GetTaskId(), Principal: q.GetPrincipal(),
			Keys: keySet(slices.Collect(maps.Keys(q.GetInputResponses())))}, true
	}
	return Input{}, false
}

// taskOutputOf maps a task reply to the model's output.
func taskOutputOf(reply any) (Output, bool) {
	switch p := reply.(type) {
	case *pb.CreateTaskResponse:
		return Output{ID: p.GetTask().GetTaskId()}, true
	case *pb.GetTaskResponse:
		return taskOutput(p.GetTask()), true
	case *pb.WaitTaskResponse:
		return taskOutput(p.GetTask()), true
	case *pb.CancelTaskResponse:
		o := taskOutput(p.GetTask())
		o.Result = RNotCancelled
		if p.GetCancelled() {
			o.Result = RCancelled
		}
		return o, true
	case *pb.SetTaskInputResponse:
		return Output{}, true
	case *pb.UpdateTaskResponse:
		o := taskOutput(p.GetTask())
		o.Accepted = inputKeys(p.GetAccepted())
		return o, true
	}
	return Output{}, false
}

// taskOutput is what a reply shows of a task.
func taskOutput(t *pb.Task) Output {
	return Output{
		State:     strings.ToLower(strings.TrimPrefix(t.GetStatus().String(), "TASK_STATUS_")),
		Initiator: coordinator.InitiatorName(t.GetInitiator()),
		Inputs:    inputKeys(t.GetInputRequests()),
	}
}

func inputKeys(in []*pb.TaskInput) string {
	var keys []string
	for _, i := range in {
		keys = append(keys, i.GetKey())
	}
	return keySet(keys)
}

// taskErrorOutput maps a task RPC's error to the model's output. A
// refusal before anything was written, or "no such task", is known; any
// other error may have come after a commit.
func taskErrorOutput(in Input, err error) Output {
	code := status.Code(err)
	switch {
	case code == codes.NotFound && in.Op != OpCreateTask:
		return Output{Result: RNotFound}
	case code == codes.InvalidArgument && (in.Op == OpSetInput || in.Op == OpUpdateTask):
		return Output{Result: RRefused}
	case in.Op == OpCreateTask && (code == codes.InvalidArgument || code == codes.NotFound ||
		code == codes.ResourceExhausted || code == codes.FailedPrecondition):
		return Output{Result: RRefused} // bad request, no worker or capacity, too many tasks, session closed
	case code == codes.FailedPrecondition:
		return Output{Result: "FAILED_PRECONDITION: " + coordinator.ErrorReason(err)} // fence or owner wrong: the model allows neither
	}
	return Output{Unknown: true}
}

// addTaskLocked keys a CreateTask by the task its reply named (a refused
// one, or one of unknown outcome, by a partition of its own: nothing can
// name its task) and remembers the task for the projections.
func (r *Recorder) addTaskLocked(in *Input, out Output, ret int64) {
	if out.ID == "" {
		r.anonymous++
		in.Key = TaskKey(fmt.Sprintf("?%d", r.anonymous))
		return
	}
	in.Key = TaskKey(out.ID)
	r.owner[out.ID] = in.Key
	r.tasksOf[in.Principal] = append(r.tasksOf[in.Principal], createdTask{key: in.Key, ret: ret})
}

func (r *Recorder) addList(req *pb.ListTasksRequest, resp *pb.ListTasksResponse, err error, client int, call, ret int64) {
	if err != nil {
		return // a read of unknown outcome tells nothing
	}
	l := listOp{principal: req.GetPrincipal(), client: client, call: call, ret: ret,
		complete: req.GetPageToken() == "" && resp.GetNextPageToken() == "", listed: map[string]Output{}}
	for _, t := range resp.GetTasks() {
		l.listed[TaskKey(t.GetTaskId())] = taskOutput(t)
	}
	r.mu.Lock()
	r.lists = append(r.lists, l)
	r.mu.Unlock()
}

// listsLocked projects every ListTasks on each task it listed that a
// CreateTask reply named, and, for a listing of all the principal's
// tasks, on the latest tasks created before it that it left out.
func (r *Recorder) listsLocked() []porcupine.Operation {
	var out []porcupine.Operation
	for _, l := range r.lists {
		in := Input{Op: OpListTask, Principal: l.principal}
		for _, k := range slices.Sorted(maps.Keys(l.listed)) {
			if !r.known(k) {
				continue // its CreateTask's reply was lost: nothing else names it
			}
			in.Key, in.ID = k, strings.TrimPrefix(k, "task:")
			out = append(out, porcupine.Operation{ClientId: l.client, Input: in, Output: l.listed[k], Call: l.call, Return: l.ret})
		}
		if !l.complete {
			continue
		}
		for _, t := range latestBefore(r.tasksOf[l.principal], l.call) {
			if _, ok := l.listed[t.key]; !ok {
				in.Key, in.ID = t.key, strings.TrimPrefix(t.key, "task:")
				out = append(out, porcupine.Operation{ClientId: l.client, Input: in, Output: Output{Result: RNotFound}, Call: l.call, Return: l.ret})
			}
		}
	}
	return out
}

// scopeTasksLocked projects a CancelScope on each task it named as
// cancelled, which the model rejects: a task is in no scope's running
// set. (One it cancelled without naming it reads cancelled by the
// scope's initiator, which no operation on the task explains.)
func (r *Recorder) scopeTasksLocked(sc scopeOp, byKey map[string]string) []porcupine.Operation {
	var out []porcupine.Operation
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		if IsTaskKey(k) {
			in := Input{Op: OpCancelScope, Key: k, Initiator: sc.initiator}
			out = append(out, porcupine.Operation{ClientId: sc.client, Input: in, Output: Output{ID: byKey[k]}, Call: sc.call, Return: sc.ret})
		}
	}
	return out
}

func (r *Recorder) known(key string) bool {
	_, ok := r.owner[strings.TrimPrefix(key, "task:")]
	return ok
}

// latestBefore returns the last tasks of ts (in reply order) answered
// before t.
func latestBefore(ts []createdTask, t int64) []createdTask {
	var out []createdTask
	for i := len(ts) - 1; i >= 0 && len(out) < projected; i-- {
		if ts[i].ret < t {
			out = append(out, ts[i])
		}
	}
	return out
}
