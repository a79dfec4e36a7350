package coordinator_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// runCounter is a task tool that counts its runs by task.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func startCounter(t *testing.T, e *env, name string, scan time.Duration) (*runCounter, *testcluster.Worker) {
	rc := &runCounter{runs: map[string]int{}}
	w := testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: name, TaskRunScan: scan}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "count", TaskSupport: worker.TaskOptional}, func(_ context.Context, c *worker.Call) (*worker.Result, error) {
			rc.mu.Lock()
			rc.runs[c.ID]++
			rc.mu.Unlock()
			return worker.Text("ran with " + string(c.Arguments)), nil
		})
	})
	waitTools(t, e.c, "count")
	return rc, w
}

func (rc *runCounter) of(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.runs[id]
}

// listed says whether the worker's task runs list the task.
func listed(t *testing.T, e *env, worker, id string) bool {
	t.Helper()
	got, err := e.c.ListTaskRuns(t.Context(), &pb.ListTaskRunsRequest{Worker: worker})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got.Runs {
		if r.CallId == id {
			return true
		}
	}
	return false
}

// A task whose gateway is lost before the task's run opens runs anyway,
// once, on its worker, with the arguments its gateway gave; and when the
// gateway and the worker open the run at the same time, it still runs
// once, whichever of them won. A settled task's run is listed no more.
func TestOrphanTaskRunsOnceOnItsWorker(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{Tasks: coordinator.TaskOptions{OrphanAfter: time.Nanosecond}}})
	rc, w := startCounter(t, e, "orphans", 5*time.Millisecond)
	wc := w.Client(t)
	create := func(id int64) *pb.CreateTaskResponse {
		t.Helper()
		ct, err := e.c.CreateTask(t.Context(), &pb.CreateTaskRequest{
			Key: key("session:orphans", num(id)), Tool: "count", Principal: "alice",
			Run: &pb.ExecuteRequest{Tool: "count", ArgumentsJson: []byte(`{"n":1}`), Principal: "alice", Task: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		return ct
	}

	// open opens a task's run as its gateway does; nil once the worker
	// holds it.
	open := func(ct *pb.CreateTaskResponse) error {
		s, err := wc.Execute(t.Context(), &pb.ExecuteRequest{CallId: ct.Task.TaskId, Fence: ct.Task.Fence, Tool: "count", Worker: "orphans", Task: true, Deadline: ct.Deadline})
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}

	// No gateway opens it: the worker does.
	lost := create(1)
	got := e.wait(t, lost.Task.TaskId, "alice")
	if got.Status != pb.TaskStatus_TASK_STATUS_COMPLETED || !strings.Contains(string(got.ResultJson), `ran with {\"n\":1}`) {
		t.Fatalf("a task nobody opened: %v %s", got.Status, got.ResultJson)
	}
	if n := rc.of(lost.Task.TaskId); n != 1 {
		t.Fatalf("a task nobody opened ran %d times", n)
	}
	if listed(t, e, "orphans", lost.Task.TaskId) {
		t.Fatal("a settled task's run is still listed")
	}
	if err := open(lost); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a late gateway opened a task's run the worker had opened: %v", err)
	}

	// The gateway and the worker race to open it.
	won := map[string]int{}
	for i := range 20 {
		ct := create(int64(100 + i))
		switch err := open(ct); status.Code(err) {
		case codes.OK:
			won["gateway"]++
		case codes.AlreadyExists:
			won["worker"]++
		default:
			t.Fatalf("opening a task's run: %v", err)
		}
		if got := e.wait(t, ct.Task.TaskId, "alice"); got.Status != pb.TaskStatus_TASK_STATUS_COMPLETED {
			t.Fatalf("task %d: %v", i, got.Status)
		}
		if n := rc.of(ct.Task.TaskId); n != 1 {
			t.Fatalf("task %d ran %d times", i, n)
		}
		if listed(t, e, "orphans", ct.Task.TaskId) {
			t.Fatalf("task %d: a settled task's run is still listed", i)
		}
	}
	t.Logf("opened first: %v", won)
}

// A task's run is left to its gateway for the coordinator's bound: a
// worker asking sooner is not given it.
func TestTaskRunWaitsForItsGateway(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{Tasks: coordinator.TaskOptions{OrphanAfter: time.Hour}}})
	rc, w := startCounter(t, e, "patient", 5*time.Millisecond)
	ct, err := e.c.CreateTask(t.Context(), &pb.CreateTaskRequest{
		Key: key("session:patient", num(1)), Tool: "count", Principal: "bob",
		Run: &pb.ExecuteRequest{Tool: "count", Principal: "bob", Task: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if listed(t, e, "patient", ct.Task.TaskId) {
		t.Fatal("a task's run was listed before its gateway's time was up")
	}
	final := e.executeTask(t, w.Client(t), ct, "count")
	if final.GetResult() == nil {
		t.Fatalf("the gateway's run: %v", final)
	}
	if n := rc.of(ct.Task.TaskId); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}
