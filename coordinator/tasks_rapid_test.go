package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

var taskOps = []string{"complete", "tool_error", "fail", "cancel", "get"}

// The task state machine, as a property over random sequences of the
// owner's Complete and Fail, the client's CancelTask and GetTask, at a
// real coordinator on a real etcd: the first terminal decision stands and
// every later one leaves status and result alone; a task reads completed
// only after a completion won, and then with that completion's result; a
// cancelled or failed task has no result; CancelTask wins only on a
// working task.
func TestTaskStateMachine(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{Tasks: coordinator.TaskOptions{MaxPerPrincipal: 1000}}})
	testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "tw"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "t", TaskSupport: worker.TaskOptional}, func(ctx context.Context, _ *worker.Call) (*worker.Result, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	waitTools(t, e.c, "t")
	var n int64
	rapid.Check(t, func(rt *rapid.T) {
		n++
		ct, err := e.c.CreateTask(t.Context(), &pb.CreateTaskRequest{Key: key("session:sm", num(n)), Tool: "t", Principal: "p"})
		if err != nil {
			rt.Fatal(err)
		}
		ref := &pb.CallRef{CallId: ct.Task.TaskId, Fence: ct.Task.Fence, Worker: ct.Task.Worker}
		status, result := pb.TaskStatus_TASK_STATUS_WORKING, ""
		working := func() bool { return status == pb.TaskStatus_TASK_STATUS_WORKING }
		for i, steps := 0, rapid.IntRange(1, 8).Draw(rt, "steps"); i < steps; i++ {
			op := rapid.SampledFrom(taskOps).Draw(rt, "op")
			text := fmt.Sprintf("result %d", i)
			switch op {
			case "complete", "tool_error":
				body := fmt.Sprintf(`{"content":[{"type":"text","text":%q}],"isError":%v}`, text, op == "tool_error")
				r, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref, ToolError: op == "tool_error", TaskResultJson: []byte(body)})
				if err != nil {
					rt.Fatal(err)
				}
				if won := r.Result == pb.SettleResult_SETTLE_RESULT_WON; won != working() && status != pb.TaskStatus_TASK_STATUS_COMPLETED {
					rt.Fatalf("complete on a %v task: %v", status, r.Result)
				}
				if working() {
					status, result = pb.TaskStatus_TASK_STATUS_COMPLETED, text
				}
			case "fail":
				r, err := e.c.Fail(t.Context(), &pb.FailRequest{Call: ref, Initiator: pb.Initiator_INITIATOR_TOOL, Reason: "broke"})
				if err != nil {
					rt.Fatal(err)
				}
				if won := r.Result == pb.SettleResult_SETTLE_RESULT_WON; won != working() && status != pb.TaskStatus_TASK_STATUS_FAILED {
					rt.Fatalf("fail on a %v task: %v", status, r.Result)
				}
				if working() {
					status = pb.TaskStatus_TASK_STATUS_FAILED
				}
			case "cancel":
				r, err := e.c.CancelTask(t.Context(), &pb.CancelTaskRequest{TaskId: ref.CallId, Principal: "p"})
				if err != nil {
					rt.Fatal(err)
				}
				if r.Cancelled != working() {
					rt.Fatalf("cancel on a %v task: cancelled=%v", status, r.Cancelled)
				}
				if working() {
					status = pb.TaskStatus_TASK_STATUS_CANCELLED
				}
			}
			got, err := e.c.GetTask(t.Context(), &pb.GetTaskRequest{TaskId: ref.CallId, Principal: "p", WithResult: true})
			if err != nil {
				rt.Fatal(err)
			}
			if got.Task.Status != status {
				rt.Fatalf("after %s: task reads %v, want %v", op, got.Task.Status, status)
			}
			if has := len(got.Task.ResultJson) > 0; has != (result != "") || !strings.Contains(string(got.Task.ResultJson), result) {
				rt.Fatalf("after %s: result %q, want %q", op, got.Task.ResultJson, result)
			}
		}
	})
}
