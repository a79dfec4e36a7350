package coordinator_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// The bounds and reach of tasks: only task-supporting tools run as tasks;
// no principal reaches another's tasks; a principal holds at most
// MaxPerPrincipal; listing pages without gaps or repeats; a result over
// the size bound fails the task, saying so; a task's handler goes on when
// its Execute stream goes, and its session's end does not cancel it.
func TestTaskBoundsAndReach(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{Tasks: coordinator.TaskOptions{MaxPerPrincipal: 3, MaxResultBytes: 1024}}})
	release := make(chan struct{})
	w := testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "tasker"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "plain"}, func(context.Context, *worker.Call) (*worker.Result, error) { return worker.Text("ok"), nil })
		w.Handle(worker.Tool{Name: "big", TaskSupport: worker.TaskOptional}, func(context.Context, *worker.Call) (*worker.Result, error) {
			b := make([]byte, 8192)
			rand.Read(b)
			return worker.Text(base64.StdEncoding.EncodeToString(b)), nil
		})
		w.Handle(worker.Tool{Name: "slow", TaskSupport: worker.TaskRequired}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			<-release // ignores its stream: a task outlives it
			return worker.Text("slow done"), nil
		})
	})
	waitTools(t, e.c, "slow")
	wc := w.Client(t)
	create := func(principal, tool string, id int64) (*pb.CreateTaskResponse, error) {
		return e.c.CreateTask(t.Context(), &pb.CreateTaskRequest{Key: key("session:s1", num(id)), Tool: tool, Principal: principal})
	}
	if _, err := create("alice", "plain", 1); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a tool without task support ran as a task: %v", err)
	}

	// A slow task whose stream goes away at once; the session ends too.
	slow, err := create("alice", "slow", 2)
	if err != nil {
		t.Fatal(err)
	}
	sctx, drop := context.WithCancel(t.Context())
	if _, err := wc.Execute(sctx, &pb.ExecuteRequest{CallId: slow.Task.TaskId, Fence: slow.Task.Fence, Tool: "slow", Deadline: slow.Deadline, Worker: slow.Task.Worker, Task: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.c.CancelScope(t.Context(), &pb.CancelScopeRequest{Scope: "session:s1", Initiator: pb.Initiator_INITIATOR_DISCONNECT}); err != nil || got.Cancelled != 0 {
		t.Fatalf("a session's end reached its task: %v %v", got, err)
	}

	// Another principal reaches none of alice's tasks.
	if _, err := e.c.GetTask(t.Context(), &pb.GetTaskRequest{TaskId: slow.Task.TaskId, Principal: "bob"}); !client.Is(err, client.ErrUnknownTask) {
		t.Fatalf("bob read alice's task: %v", err)
	}
	if _, err := e.c.CancelTask(t.Context(), &pb.CancelTaskRequest{TaskId: slow.Task.TaskId, Principal: "bob"}); !client.Is(err, client.ErrUnknownTask) {
		t.Fatalf("bob cancelled alice's task: %v", err)
	}
	if got, err := e.c.ListTasks(t.Context(), &pb.ListTasksRequest{Principal: "bob"}); err != nil || len(got.Tasks) != 0 {
		t.Fatalf("bob lists %v (%v)", got, err)
	}

	// A result over the bound fails its task, saying so.
	big, err := create("alice", "big", 3)
	if err != nil {
		t.Fatal(err)
	}
	final := e.executeTask(t, wc, big, "big")
	done := e.wait(t, big.Task.TaskId, "alice")
	if done.Status != pb.TaskStatus_TASK_STATUS_FAILED || !strings.Contains(done.StatusMessage, "at most 1024") || final.GetFailed() == nil {
		t.Fatalf("an oversized result: task %v %q, stream ended with %v", done.Status, done.StatusMessage, final)
	}

	// Three live tasks are alice's limit.
	third, err := create("alice", "big", 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create("alice", "big", 5); !client.Is(err, client.ErrTooManyTasks) {
		t.Fatalf("a fourth task: %v", err)
	}
	seen := map[string]int{}
	for tok, pages := "", 0; ; pages++ {
		got, err := e.c.ListTasks(t.Context(), &pb.ListTasksRequest{Principal: "alice", PageSize: 2, PageToken: tok})
		if err != nil || pages > 3 {
			t.Fatalf("list: %v after %d pages", err, pages)
		}
		for _, tk := range got.Tasks {
			seen[tk.TaskId]++
		}
		if tok = got.NextPageToken; tok == "" {
			break
		}
	}
	if len(seen) != 3 || seen[slow.Task.TaskId] != 1 || seen[big.Task.TaskId] != 1 || seen[third.Task.TaskId] != 1 {
		t.Fatalf("pages listed %v", seen)
	}

	// The slow task's work finishes with its stream long gone.
	drop()
	close(release)
	if got := e.wait(t, slow.Task.TaskId, "alice"); got.Status != pb.TaskStatus_TASK_STATUS_COMPLETED || !strings.Contains(string(got.ResultJson), "slow done") {
		t.Fatalf("the task whose stream went: %v %s", got.Status, got.ResultJson)
	}
}

func (e *env) executeTask(t *testing.T, wc pb.WorkerServiceClient, c *pb.CreateTaskResponse, tool string) *pb.ExecuteResponse {
	t.Helper()
	s, err := wc.Execute(t.Context(), &pb.ExecuteRequest{CallId: c.Task.TaskId, Fence: c.Task.Fence, Tool: tool, Deadline: c.Deadline, Worker: c.Task.Worker, Task: true})
	if err != nil {
		t.Fatal(err)
	}
	return (&execStream{stream: s}).final(t)
}

func (e *env) wait(t *testing.T, id, principal string) *pb.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	got, err := e.c.WaitTask(ctx, &pb.WaitTaskRequest{TaskId: id, Principal: principal})
	if err != nil {
		t.Fatalf("wait task: %v", err)
	}
	return got.Task
}

// A task is gone when its TTL passes: its call's deadline is the TTL, so
// its worker stops it, and its entry and result expire with its lease.
func TestTaskExpires(t *testing.T) {
	e := newEnv(t, envOptions{})
	w := testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "expirer"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "forever", TaskSupport: worker.TaskOptional}, func(ctx context.Context, _ *worker.Call) (*worker.Result, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	waitTools(t, e.c, "forever")
	ct, err := e.c.CreateTask(t.Context(), &pb.CreateTaskRequest{Key: key("session:ttl", num(1)), Tool: "forever", Principal: "p", Ttl: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if got := ct.Task.Ttl.AsDuration(); got != time.Second {
		t.Fatalf("ttl %v", got)
	}
	final := e.executeTask(t, w.Client(t), ct, "forever")
	if final.GetCancelled().GetInitiator() != pb.Initiator_INITIATOR_TIMEOUT {
		t.Fatalf("the task's call at its TTL: %v", final)
	}
	testcluster.WaitFor(t, "the task to expire", func() bool {
		_, err := e.c.GetTask(t.Context(), &pb.GetTaskRequest{TaskId: ct.Task.TaskId, Principal: "p"})
		return client.Is(err, client.ErrUnknownTask)
	})
}
