package coordinator_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// inputTaskEnv is a coordinator with a worker offering a task tool whose
// calls the test drives itself, as their worker would.
func inputTaskEnv(t *testing.T) *env {
	t.Helper()
	// Cancelled tasks stay live until their TTL: the races hold many.
	e := newEnv(t, envOptions{coord: coordinator.Options{Tasks: coordinator.TaskOptions{MaxPerPrincipal: 1000}}})
	testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "asker"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "asks", TaskSupport: worker.TaskRequired}, func(ctx context.Context, _ *worker.Call) (*worker.Result, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	waitTools(t, e.c, "asks")
	return e
}

func (e *env) newTask(t *testing.T, principal string, id int64) *pb.Task {
	t.Helper()
	got, err := e.c.CreateTask(t.Context(), &pb.CreateTaskRequest{Key: key("stream:s", num(id)), Tool: "asks", Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	return got.Task
}

func ask(keys ...string) []*pb.TaskInput {
	var out []*pb.TaskInput
	for i, k := range keys {
		out = append(out, &pb.TaskInput{Key: k, Seq: int64(i + 1), Method: "elicitation/create", ParamsJson: []byte(`{"message":"` + k + `?"}`)})
	}
	return out
}

func inputKeys(t *pb.Task) []string {
	var out []string
	for _, in := range t.GetInputRequests() {
		out = append(out, in.GetKey())
	}
	return out
}

// What a task's call waits on: only its own worker, at its fence, sets
// it; a key is unique over the task's life; only the task's principal
// answers; an answer is taken once, for a request still outstanding; and
// the task is input_required exactly while something is.
func TestTaskInputRules(t *testing.T) {
	e := inputTaskEnv(t)
	task := e.newTask(t, "alice", 1)
	ref := &pb.CallRef{CallId: task.TaskId, Fence: task.Fence, Worker: task.Worker}
	set := func(ref *pb.CallRef, ask []*pb.TaskInput, withdraw ...string) error {
		_, err := e.c.SetTaskInput(t.Context(), &pb.SetTaskInputRequest{Call: ref, Ask: ask, Withdraw: withdraw})
		return err
	}
	get := func() *pb.Task {
		got, err := e.c.GetTask(t.Context(), &pb.GetTaskRequest{TaskId: task.TaskId, Principal: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		return got.Task
	}
	update := func(principal string, keys ...string) (*pb.UpdateTaskResponse, error) {
		answers := map[string][]byte{}
		for _, k := range keys {
			answers[k] = []byte(`{"action":"accept"}`)
		}
		return e.c.UpdateTask(t.Context(), &pb.UpdateTaskRequest{TaskId: task.TaskId, Principal: principal, InputResponses: answers})
	}

	if err := set(&pb.CallRef{CallId: task.TaskId, Fence: task.Fence, Worker: "w1"}, ask("a")); !client.Is(err, client.ErrNotOwner) {
		t.Fatalf("another worker set the task's input: %v", err)
	}
	if err := set(&pb.CallRef{CallId: task.TaskId, Fence: task.Fence + 1, Worker: task.Worker}, ask("a")); !client.Is(err, client.ErrFenceMismatch) {
		t.Fatalf("a stale fence set the task's input: %v", err)
	}
	if err := set(ref, ask("a", "b")); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Status != pb.TaskStatus_TASK_STATUS_INPUT_REQUIRED || len(inputKeys(got)) != 2 {
		t.Fatalf("after asking two: %v %v", got.Status, inputKeys(got))
	}
	if err := set(ref, ask("a")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a key asked twice: %v", err)
	}
	if _, err := update("bob", "a"); !client.Is(err, client.ErrUnknownTask) {
		t.Fatalf("bob answered alice's task: %v", err)
	}
	got, err := update("alice", "a", "never-asked")
	if err != nil || len(got.Accepted) != 1 || got.Accepted[0].Key != "a" || got.Accepted[0].Seq != 1 || got.Scope != "stream:s" || got.WorkerAddress == "" {
		t.Fatalf("answering a: %v %v", got, err)
	}
	if got := get(); got.Status != pb.TaskStatus_TASK_STATUS_INPUT_REQUIRED || len(inputKeys(got)) != 1 || inputKeys(got)[0] != "b" {
		t.Fatalf("after answering a: %v %v", got.Status, inputKeys(got))
	}
	if got, err := update("alice", "a"); err != nil || len(got.Accepted) != 0 {
		t.Fatalf("a answered twice: %v %v", got, err)
	}
	if err := set(ref, nil, "b"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Status != pb.TaskStatus_TASK_STATUS_WORKING || len(got.InputRequests) != 0 {
		t.Fatalf("after withdrawing b: %v %v", got.Status, inputKeys(got))
	}
	for _, k := range []string{"a", "b"} {
		if err := set(ref, ask(k)); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("key %s used again: %v", k, err)
		}
	}
	if err := set(ref, ask("c")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CancelTask(t.Context(), &pb.CancelTaskRequest{TaskId: task.TaskId, Principal: "alice"}); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Status != pb.TaskStatus_TASK_STATUS_CANCELLED || len(got.InputRequests) != 0 {
		t.Fatalf("a cancelled task: %v %v", got.Status, inputKeys(got))
	}
	if got, err := update("alice", "c"); err != nil || len(got.Accepted) != 0 {
		t.Fatalf("an update after the cancel took %v (%v)", got, err)
	}
	if err := set(ref, ask("d")); err == nil {
		t.Fatal("a cancelled task's call asked its client")
	}
}

// tasks/cancel races tasks/update at the coordinator, many times: each
// time the update either took the answer while the task ran (before the
// cancel's transaction) or found the task cancelled and took nothing;
// the task ends cancelled with exactly one decision either way.
func TestTaskUpdateRacesCancel(t *testing.T) {
	e := inputTaskEnv(t)
	const races = 200
	took := 0
	for i := range races {
		task := e.newTask(t, "alice", int64(100+i))
		ref := &pb.CallRef{CallId: task.TaskId, Fence: task.Fence, Worker: task.Worker}
		if _, err := e.c.SetTaskInput(t.Context(), &pb.SetTaskInputRequest{Call: ref, Ask: ask("k")}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var upd *pb.UpdateTaskResponse
		var uerr, cerr error
		wg.Go(func() {
			upd, uerr = e.c.UpdateTask(t.Context(), &pb.UpdateTaskRequest{TaskId: task.TaskId, Principal: "alice",
				InputResponses: map[string][]byte{"k": []byte(`{"action":"accept"}`)}})
		})
		wg.Go(func() {
			_, cerr = e.c.CancelTask(t.Context(), &pb.CancelTaskRequest{TaskId: task.TaskId, Principal: "alice"})
		})
		wg.Wait()
		if uerr != nil || cerr != nil {
			t.Fatalf("update %v, cancel %v", uerr, cerr)
		}
		switch {
		case len(upd.Accepted) == 1 && upd.Task.Status == pb.TaskStatus_TASK_STATUS_WORKING:
			took++
		case len(upd.Accepted) == 0 && upd.Task.Status == pb.TaskStatus_TASK_STATUS_CANCELLED:
		default:
			t.Fatalf("race %d: the update took %v and saw the task %v", i, upd.Accepted, upd.Task.Status)
		}
		got, err := e.c.GetTask(t.Context(), &pb.GetTaskRequest{TaskId: task.TaskId, Principal: "alice"})
		if err != nil || got.Task.Status != pb.TaskStatus_TASK_STATUS_CANCELLED {
			t.Fatalf("race %d: the task is %v (%v)", i, got.GetTask().GetStatus(), err)
		}
		if as := e.audits(t, task.TaskId); len(as) != 1 || as[0].Outcome != "cancelled" {
			t.Fatalf("race %d: audit %v", i, outcomes(as))
		}
	}
	t.Logf("%d races: the update took the answer first %d times, found the task cancelled %d times", races, took, races-took)
}
