package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"google.golang.org/grpc"
)

// taskHold is a task tool whose handler runs until the test releases it,
// and ignores cancellation, as a tool that finishes its work anyway does.
type taskHold struct {
	started  chan string   // call ids
	release  chan struct{} // one per handler
	returned chan string   // call ids, once the handler returned
}

func (h *taskHold) handle(_ context.Context, c *worker.Call) (*worker.Result, error) {
	h.started <- c.ID
	<-h.release
	defer func() { h.returned <- c.ID }()
	return worker.Text("work of " + c.ID + " done"), nil
}

// researchStack is etcd, a coordinator and a worker whose task tool
// "research" runs each handler until the test releases it.
func researchStack(t *testing.T) (*taskHold, *grpc.ClientConn, *etcdtest.Cluster) {
	t.Helper()
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	h := &taskHold{started: make(chan string, 8), release: make(chan struct{}, 8), returned: make(chan string, 8)}
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "tw"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "research", TaskSupport: worker.TaskOptional}, h.handle)
	})
	conn := coord.Conn(t)
	waitFor(t, "the task tool", func() bool {
		resp, err := pb.NewCoordinatorServiceClient(conn).ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) == 1
	})
	return h, conn, cl
}

// rpc POSTs one request in a 2025 session and returns its response.
func rpc(t *testing.T, url, session string, id any, method string, params any) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msgs []map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		msgs = readSSE(resp.Body)
	} else {
		var m map[string]any
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %d %s", method, resp.StatusCode, b)
		}
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		if m["method"] == nil && sameID(m["id"], id) {
			return m
		}
	}
	t.Fatalf("%s: no response among %v", method, msgs)
	return nil
}

func resultOf(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	r, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("want a result, got %v", m)
	}
	return r
}

func errorCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

// Tasks across two gateway replicas, 2025-11-25: a task created on A is
// read and cancelled through B (another session); it stays cancelled after
// its work finished; a second tasks/cancel is -32602. A second task's
// result is served by B after A is gone (closed: its Execute streams cut,
// as a kill would cut them), and tasks/list on B shows both.
func TestTasksAcrossReplicas(t *testing.T) {
	h, conn, cl := researchStack(t)
	gA, urlA := testcluster.StartGateway(t, conn, gateway.Options{})
	_, urlB := testcluster.StartGateway(t, conn, gateway.Options{})
	sa, sb := openSession(t, urlA), openSession(t, urlB)

	// tools/list shows the tool's task support.
	tools := resultOf(t, rpc(t, urlB, sb, 1, "tools/list", map[string]any{}))["tools"].([]any)
	if ex, _ := tools[0].(map[string]any)["execution"].(map[string]any); ex["taskSupport"] != "optional" {
		t.Fatalf("tools/list: %v", tools)
	}

	// A task created on A: CreateTaskResult, and its handler started.
	created := resultOf(t, rpc(t, urlA, sa, 2, "tools/call", map[string]any{"name": "research", "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}}))
	task1 := created["task"].(map[string]any)
	id1 := task1["taskId"].(string)
	if task1["status"] != "working" || task1["ttl"] != float64(60000) {
		t.Fatalf("CreateTaskResult: %v", created)
	}
	if got := <-h.started; got != id1 {
		t.Fatalf("handler of %s started, want %s", got, id1)
	}
	// Through B: get, then cancel; cancelled before the reply.
	if st := resultOf(t, rpc(t, urlB, sb, 3, "tasks/get", map[string]any{"taskId": id1}))["status"]; st != "working" {
		t.Fatalf("tasks/get on B: %v", st)
	}
	if st := resultOf(t, rpc(t, urlB, sb, 4, "tasks/cancel", map[string]any{"taskId": id1}))["status"]; st != "cancelled" {
		t.Fatalf("tasks/cancel on B: %v", st)
	}
	// Its work finishes anyway; the task stays cancelled.
	h.release <- struct{}{}
	if got := <-h.returned; got != id1 {
		t.Fatalf("handler of %s returned, want %s", got, id1)
	}
	if st := resultOf(t, rpc(t, urlB, sb, 5, "tasks/get", map[string]any{"taskId": id1}))["status"]; st != "cancelled" {
		t.Fatalf("tasks/get after the work finished: %v", st)
	}
	if code := errorCode(rpc(t, urlB, sb, 6, "tasks/cancel", map[string]any{"taskId": id1})); code != -32602 {
		t.Fatalf("second tasks/cancel: code %v, want -32602", code)
	}

	// A second task, created on A; A goes away; its work finishes; B
	// serves its result and lists it.
	id2 := resultOf(t, rpc(t, urlA, sa, 7, "tools/call", map[string]any{"name": "research", "arguments": map[string]any{}, "task": map[string]any{}}))["task"].(map[string]any)["taskId"].(string)
	if got := <-h.started; got != id2 {
		t.Fatalf("handler of %s started, want %s", got, id2)
	}
	gA.Close()
	h.release <- struct{}{}
	res := resultOf(t, rpc(t, urlB, sb, 8, "tasks/result", map[string]any{"taskId": id2}))
	text := res["content"].([]any)[0].(map[string]any)["text"]
	related, _ := res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)
	if text != "work of "+id2+" done" || related["taskId"] != id2 {
		t.Fatalf("tasks/result on B: %v", res)
	}
	listed := map[string]string{}
	for _, x := range resultOf(t, rpc(t, urlB, sb, 9, "tasks/list", map[string]any{}))["tasks"].([]any) {
		m := x.(map[string]any)
		listed[m["taskId"].(string)] = m["status"].(string)
	}
	if listed[id1] != "cancelled" || listed[id2] != "completed" || len(listed) != 2 {
		t.Fatalf("tasks/list on B: %v", listed)
	}
	// Each task has one decision, with its task id.
	all := testcluster.Audits(t, cl.Client())
	for id, want := range map[string]string{id1: "cancelled", id2: "completed"} {
		as := all[id]
		if len(as) != 1 || as[0].Outcome != want || as[0].TaskID != id {
			t.Fatalf("audit of %s: %+v", id, as)
		}
	}
}

// A 2025-11-25 client that listens on its session's GET stream hears its
// task's progress (tagged with the task) and notifications/tasks/status
// when the task ends.
func TestTaskNotifications(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	go1 := make(chan struct{})
	release := sync.OnceFunc(func() { close(go1) })
	t.Cleanup(release) // the handler never outlives a failed test
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "nw"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "steps", TaskSupport: worker.TaskOptional}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			c.Progress(1, 2, "half")
			<-go1
			return worker.Text("stepped"), nil
		})
	})
	conn := coord.Conn(t)
	waitFor(t, "the task tool", func() bool {
		resp, err := pb.NewCoordinatorServiceClient(conn).ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) == 1
	})
	// The gateway pings clients on their GET streams: the first ping says
	// the stream is registered, so the task's notifications have a listener.
	_, url := testcluster.StartGateway(t, conn, gateway.Options{PingInterval: 50 * time.Millisecond})
	s := openSession(t, url)
	heard := getStream(t, url, s)
	next := func(method string) map[string]any {
		t.Helper()
		p, _ := nextOn(t, heard, method)["params"].(map[string]any)
		return p
	}
	next("ping")
	created := resultOf(t, rpc(t, url, s, 1, "tools/call", map[string]any{
		"name": "steps", "arguments": map[string]any{}, "task": map[string]any{}, "_meta": map[string]any{"progressToken": "tok"},
	}))
	id := created["task"].(map[string]any)["taskId"].(string)
	p := next("notifications/progress")
	if rel, _ := p["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any); p["progressToken"] != "tok" || rel["taskId"] != id {
		t.Fatalf("progress: %v", p)
	}
	release()
	if st := next("notifications/tasks/status"); st["taskId"] != id || st["status"] != "completed" {
		t.Fatalf("status: %v", st)
	}
}

// A gateway that goes away the moment it answered CreateTaskResult
// leaves a task that runs: the answer goes out only once the task's
// worker holds it (soak 8 found three tasks nobody started, failed by the
// janitor past their deadline, when the gateway died in between).
func TestTaskRunsWhenItsGatewayGoesAtOnce(t *testing.T) {
	h, conn, _ := researchStack(t)
	_, urlB := testcluster.StartGateway(t, conn, gateway.Options{})
	sb := openSession(t, urlB)
	for i := range 5 {
		gA, urlA := testcluster.StartGateway(t, conn, gateway.Options{})
		sa := openSession(t, urlA)
		created := resultOf(t, rpc(t, urlA, sa, 1, "tools/call", map[string]any{"name": "research", "arguments": map[string]any{}, "task": map[string]any{"ttl": 60000}}))
		id := created["task"].(map[string]any)["taskId"].(string)
		gA.Close() // at once: its Execute streams are cut
		select {
		case got := <-h.started:
			if got != id {
				t.Fatalf("round %d: handler of %s started, want %s", i, got, id)
			}
		case <-time.After(20 * time.Second): // a bound, not a wait for anything
			t.Fatalf("round %d: nobody started task %s after its gateway went", i, id)
		}
		h.release <- struct{}{}
		res := resultOf(t, rpc(t, urlB, sb, 2+i, "tasks/result", map[string]any{"taskId": id}))
		if text := res["content"].([]any)[0].(map[string]any)["text"]; text != "work of "+id+" done" {
			t.Fatalf("round %d: tasks/result on B: %v", i, res)
		}
	}
}

// A task keeps its run as the gateway executes it, for its worker to
// start should the gateway be lost first (coordinator/tasks_runs.go):
// listed to the task's worker once the bound passes, with the client's
// arguments, and not run again there while the gateway's run goes on;
// gone once the task ends.
func TestTaskKeepsItsRun(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{Tasks: coordinator.TaskOptions{OrphanAfter: time.Nanosecond}})
	h := &taskHold{started: make(chan string, 8), release: make(chan struct{}, 8), returned: make(chan string, 8)}
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "tw", TaskRunScan: 5 * time.Millisecond}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "research", TaskSupport: worker.TaskOptional}, h.handle)
	})
	conn := coord.Conn(t)
	cc := pb.NewCoordinatorServiceClient(conn)
	waitFor(t, "the task tool", func() bool {
		resp, err := cc.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) == 1
	})
	_, url := testcluster.StartGateway(t, conn, gateway.Options{})
	s := openSession(t, url)
	created := resultOf(t, rpc(t, url, s, 1, "tools/call", map[string]any{"name": "research", "arguments": map[string]any{"topic": "tides"}, "task": map[string]any{}}))
	id := created["task"].(map[string]any)["taskId"].(string)
	if got := <-h.started; got != id {
		t.Fatalf("handler of %s started, want %s", got, id)
	}
	runs := func() []*pb.ExecuteRequest {
		resp, err := cc.ListTaskRuns(t.Context(), &pb.ListTaskRunsRequest{Worker: "tw"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Runs
	}
	got := runs()
	if len(got) != 1 || got[0].CallId != id || got[0].Tool != "research" || string(got[0].ArgumentsJson) != `{"topic":"tides"}` || !got[0].Task || got[0].Worker != "tw" {
		t.Fatalf("the task's run as kept: %v", got)
	}
	// The worker asks twice more, so at least once after the run was
	// listed, and finds it opened already.
	asked := func() float64 {
		return gathered(t, coord.Server.Registry(), "grpc_server_handled_total", "grpc_method", "ListTaskRuns", "grpc_code", "OK")
	}
	then := asked()
	waitFor(t, "the worker to ask for its task runs twice", func() bool { return asked() >= then+2 })
	h.release <- struct{}{}
	<-h.returned
	waitFor(t, "the ended task's run to go", func() bool { return len(runs()) == 0 })
	if len(h.started) != 0 {
		t.Fatal("the worker ran a task its gateway had opened")
	}
}
