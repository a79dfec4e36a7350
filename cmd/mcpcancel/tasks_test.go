package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// TestTasksAcrossReplicaProcesses is issue 21's two-replica story with
// every part its own process of the built binary: a coordinator, a worker
// fronting server-everything (whose simulate-research-query runs only as a
// task, four one-second stages), and gateways A and B. A task created on A
// is read and cancelled through B; a second task created on A has its
// result served by B after A is SIGKILLed; the first is still cancelled
// after the second, begun later with the same work, completed; a second
// tasks/cancel of it is -32602; tasks/list on B shows both. Each task has
// one decision, audited with its task id, and only the completed one has
// a stored result: the cancelled task's work left no trace.
func TestTasksAcrossReplicaProcesses(t *testing.T) {
	server := filepath.Join(nodetest.Install(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	etcd := etcdtest.Single(t)
	coord := start(t, nil, "coordinator", "--listen", "127.0.0.1:0", "--etcd", strings.Join(etcd.Endpoints(), ","))
	coordAddr := coord.waitLine(t, "coordinator: ")
	wk := start(t, nil, "worker", "--coordinator", coordAddr, "--name", "everything", "--admin", "127.0.0.1:0",
		"--upstream-stdio", "node '"+server+"' stdio")
	admin := wk.waitLine(t, "admin: ")
	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	waitForTools(t, client, "simulate-research-query")
	gwA := start(t, nil, "gateway", "--http", "127.0.0.1:0", "--coordinator", coordAddr, "--name", "A")
	urlA := gwA.waitLine(t, "mcp: ")
	gwB := start(t, nil, "gateway", "--http", "127.0.0.1:0", "--coordinator", coordAddr, "--name", "B")
	urlB := gwB.waitLine(t, "mcp: ")
	sa, sb := openTaskSession(t, urlA), openTaskSession(t, urlB)

	tools := sb.result(t, "tools/list", map[string]any{})["tools"].([]any)
	if support := toolTaskSupport(tools, "simulate-research-query"); support != "required" {
		t.Fatalf("tools/list on B: simulate-research-query has taskSupport %q, want required", support)
	}
	research := func(topic string) map[string]any {
		return map[string]any{"name": "simulate-research-query", "arguments": map[string]any{"topic": topic}, "task": map[string]any{"ttl": 120000}}
	}

	// Task 1, created on A, read and cancelled through B.
	id1 := createdTask(t, sa.result(t, "tools/call", research("first")))
	if st := sb.result(t, "tasks/get", map[string]any{"taskId": id1})["status"]; st != "working" {
		t.Fatalf("tasks/get on B: %v, want working", st)
	}
	if st := sb.result(t, "tasks/cancel", map[string]any{"taskId": id1})["status"]; st != "cancelled" {
		t.Fatalf("tasks/cancel on B: %v, want cancelled", st)
	}
	// Its handler stops (the worker runs nothing), so the next one seen
	// running is task 2's.
	poll(t, "task 1's handler stopped", func() bool { return inFlight(t, admin) == 0 })

	// Task 2, created on A, running on the worker when A is SIGKILLed.
	id2 := createdTask(t, sa.result(t, "tools/call", research("second")))
	poll(t, "task 2's handler running", func() bool { return inFlight(t, admin) == 1 })
	gwA.signal(t, syscall.SIGKILL)
	<-gwA.exited
	if ws, ok := gwA.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("gateway A ended %v, want killed by SIGKILL", gwA.cmd.ProcessState)
	}
	res := sb.result(t, "tasks/result", map[string]any{"taskId": id2})
	text, _ := res["content"].([]any)[0].(map[string]any)["text"].(string)
	related, _ := res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)
	if !strings.HasPrefix(text, "# Research Report: second") || related["taskId"] != id2 || res["isError"] == true {
		t.Fatalf("tasks/result of task 2 on B: %v", res)
	}

	// Task 1's work, begun before task 2's, would have finished by now.
	if st := sb.result(t, "tasks/get", map[string]any{"taskId": id1})["status"]; st != "cancelled" {
		t.Fatalf("task 1 after its work would have finished: %v, want cancelled", st)
	}
	if e := sb.call(t, "tasks/cancel", map[string]any{"taskId": id1}); errCode(e) != -32602 {
		t.Fatalf("a second tasks/cancel of task 1: %v, want error -32602", e)
	}
	if e := sb.call(t, "tasks/result", map[string]any{"taskId": id1}); e["result"] != nil || !strings.Contains(errMessage(e), "cancelled") {
		t.Fatalf("tasks/result of task 1: %v, want the cancellation's error", e)
	}
	listed := map[string]string{}
	for _, x := range sb.result(t, "tasks/list", map[string]any{})["tasks"].([]any) {
		m := x.(map[string]any)
		listed[m["taskId"].(string)] = m["status"].(string)
	}
	if len(listed) != 2 || listed[id1] != "cancelled" || listed[id2] != "completed" {
		t.Fatalf("tasks/list on B: %v, want %s cancelled and %s completed", listed, id1, id2)
	}
	checkTaskDecisions(t, client, etcd.Client(), map[string]string{id1: "cancelled", id2: "completed"})
}

// checkTaskDecisions wants one audit record per task, with its task id and
// the outcome given, and a stored result only for a completed task.
func checkTaskDecisions(t *testing.T, client pb.CoordinatorServiceClient, cli *clientv3.Client, want map[string]string) {
	t.Helper()
	resp, err := client.ListAudit(t.Context(), &pb.ListAuditRequest{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, a := range resp.GetRecords() {
		got[a.GetCallId()] = append(got[a.GetCallId()], a.GetOutcome()+"/"+a.GetTaskId())
	}
	for id, outcome := range want {
		if rs := got[id]; len(rs) != 1 || rs[0] != outcome+"/"+id {
			t.Errorf("audit of task %s: %v, want one %s record naming the task", id, rs, outcome)
		}
		stored, err := cli.Get(t.Context(), "/mcpcancel/v1/task-results/"+id, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if (stored.Count == 1) != (outcome == "completed") {
			t.Errorf("task %s ended %s with %d stored results", id, outcome, stored.Count)
		}
	}
}

// inFlight reads mcpcancel_worker_calls_in_flight from a worker's /metrics.
func inFlight(t *testing.T, admin string) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mcpcancel_worker_calls_in_flight "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(f)
		}
	}
	t.Fatal("no mcpcancel_worker_calls_in_flight in the worker's /metrics")
	return 0
}

func toolTaskSupport(tools []any, name string) string {
	for _, x := range tools {
		m, _ := x.(map[string]any)
		if m["name"] == name {
			ex, _ := m["execution"].(map[string]any)
			s, _ := ex["taskSupport"].(string)
			return s
		}
	}
	return ""
}

func createdTask(t *testing.T, res map[string]any) string {
	t.Helper()
	task, _ := res["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if id == "" || task["status"] != "working" {
		t.Fatalf("want a CreateTaskResult of a working task, got %v", res)
	}
	return id
}

func errCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

func errMessage(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// taskSession is a 2025-11-25 session spoken as raw JSON-RPC: the Go SDK
// has no client side of tasks.
type taskSession struct {
	url, id string
	next    int
}

func openTaskSession(t *testing.T, url string) *taskSession {
	t.Helper()
	s := &taskSession{url: url}
	resp := s.post(t, map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "tasks-test", "version": "1"},
	}})
	s.id = resp.Header.Get("Mcp-Session-Id")
	resp.Body.Close()
	if s.id == "" {
		t.Fatalf("initialize on %s: no Mcp-Session-Id", url)
	}
	s.post(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}).Body.Close()
	return s
}

func (s *taskSession) post(t *testing.T, msg map[string]any) *http.Response {
	t.Helper()
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%v: HTTP %d %s", msg["method"], resp.StatusCode, b)
	}
	return resp
}

// call sends one request and returns its response, from a JSON body or
// an event stream.
func (s *taskSession) call(t *testing.T, method string, params any) map[string]any {
	t.Helper()
	s.next++
	id := s.next
	resp := s.post(t, map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	defer resp.Body.Close()
	var bodies [][]byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:")); ok {
				bodies = append(bodies, bytes.Clone(d))
			}
		}
	} else {
		b, _ := io.ReadAll(resp.Body)
		bodies = append(bodies, b)
	}
	for _, b := range bodies {
		var m map[string]any
		if json.Unmarshal(b, &m) == nil && m["method"] == nil && fmt.Sprint(m["id"]) == fmt.Sprint(id) {
			return m
		}
	}
	t.Fatalf("%s: no response among %q", method, bodies)
	return nil
}

// result is call's result, failing the test on an error.
func (s *taskSession) result(t *testing.T, method string, params any) map[string]any {
	t.Helper()
	m := s.call(t, method, params)
	r, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("%s: want a result, got %v", method, m)
	}
	return r
}
