package upstream_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

const researchTool = "simulate-research-query"

// server-everything's simulate-research-query requires task augmentation.
// Through two gateway replicas, a 2025-11-25 client runs it as a task:
// the adapter offers it as a task tool, calls it upstream as a task of the
// server's own (params.task, then tasks/result). A task created on A is
// read and cancelled through B, which reaches the server as tasks/cancel
// naming the server's own task id; a second tasks/cancel is -32602.
// Another task created on A has its report served by B after A is gone,
// and tasks/list on B shows both.
func TestResearchQueryAsTask(t *testing.T) {
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd}, researchTool)
	tools := st.waitTools(t, func(tools map[string]*pb.Tool) bool { return tools[researchTool] != nil })
	if ts := tools[researchTool].GetTaskSupport(); ts != "required" {
		t.Fatalf("the adapter offers %s with task support %q, want required", researchTool, ts)
	}
	_, urlB := testcluster.StartGateway(t, testcluster.Conn(t, st.coordAddr), gateway.Options{})
	sa, sb := taskSession(t, st.url), taskSession(t, urlB)
	if code := taskErrorCode(taskRPC(t, st.url, sa, 1, "tools/call", map[string]any{"name": researchTool, "arguments": map[string]any{"topic": "x"}})); code != -32601 {
		t.Fatalf("a plain call of a task-only tool: code %v, want -32601", code)
	}

	created := taskResult(t, taskRPC(t, st.url, sa, 2, "tools/call", map[string]any{"name": researchTool, "arguments": map[string]any{"topic": "etcd leases"}, "task": map[string]any{}}))
	id := created["task"].(map[string]any)["taskId"].(string)
	second := taskResult(t, taskRPC(t, st.url, sa, 3, "tools/call", map[string]any{"name": researchTool, "arguments": map[string]any{"topic": "never finished"}, "task": map[string]any{}}))
	id2 := second["task"].(map[string]any)["taskId"].(string)
	// The server must have created its task before the cancel can name it.
	testcluster.WaitFor(t, "the server's tasks", func() bool { return len(upstreamTaskIDs(t, tp)) == 2 })
	if got := taskResult(t, taskRPC(t, urlB, sb, 4, "tasks/get", map[string]any{"taskId": id2}))["status"]; got != "working" {
		t.Fatalf("tasks/get on B: %v", got)
	}
	if got := taskResult(t, taskRPC(t, urlB, sb, 5, "tasks/cancel", map[string]any{"taskId": id2}))["status"]; got != "cancelled" {
		t.Fatalf("tasks/cancel on B: %v", got)
	}
	// The server's two tasks may have been created in either order; the
	// cancel names one of them, once.
	theirs := upstreamTaskIDs(t, tp)
	testcluster.WaitFor(t, "tasks/cancel at the server", func() bool {
		return wireHas(t, tp, `"method":"tasks/cancel"`, theirs[0]) != wireHas(t, tp, `"method":"tasks/cancel"`, theirs[1])
	})
	if wireHas(t, tp, `"method":"notifications/cancelled"`, "") {
		t.Error("the server was sent notifications/cancelled for a task; a task is cancelled with tasks/cancel")
	}
	if code := taskErrorCode(taskRPC(t, urlB, sb, 6, "tasks/cancel", map[string]any{"taskId": id2})); code != -32602 {
		t.Fatalf("a second tasks/cancel: code %v, want -32602", code)
	}

	st.gw.Close() // A is gone; its task goes on
	res := taskResult(t, taskRPC(t, urlB, sb, 7, "tasks/result", map[string]any{"taskId": id}))
	b, _ := json.Marshal(res)
	if !strings.Contains(string(b), "etcd leases") || res["isError"] == true {
		t.Fatalf("tasks/result on B: %s", b)
	}
	listed := map[string]any{}
	for _, x := range taskResult(t, taskRPC(t, urlB, sb, 8, "tasks/list", map[string]any{}))["tasks"].([]any) {
		listed[x.(map[string]any)["taskId"].(string)] = x.(map[string]any)["status"]
	}
	if listed[id] != "completed" || listed[id2] != "cancelled" {
		t.Fatalf("tasks/list on B: %v", listed)
	}
}

// upstreamTaskIDs are the task ids the server's CreateTaskResults named.
func upstreamTaskIDs(t *testing.T, tp *tap) []string {
	t.Helper()
	var ids []string
	for _, line := range wireLines(t, tp) {
		var m struct {
			Result struct {
				Task struct {
					TaskID string `json:"taskId"`
				} `json:"task"`
			} `json:"result"`
		}
		if i := strings.IndexByte(line, '{'); i >= 0 && json.Unmarshal([]byte(line[i:]), &m) == nil && m.Result.Task.TaskID != "" {
			ids = append(ids, m.Result.Task.TaskID)
		}
	}
	return ids
}

func wireHas(t *testing.T, tp *tap, s, and string) bool {
	for _, line := range wireLines(t, tp) {
		if strings.Contains(line, s) && strings.Contains(line, and) {
			return true
		}
	}
	return false
}

func wireLines(t *testing.T, tp *tap) []string {
	t.Helper()
	b, err := os.ReadFile(tp.file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

func taskSession(t *testing.T, url string) string {
	t.Helper()
	resp := post(t, url, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get("Mcp-Session-Id")
}

func post(t *testing.T, url, session, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// taskRPC sends one request in the session and returns its response.
func taskRPC(t *testing.T, url, session string, id int, method string, params any) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	resp := post(t, url, session, string(body))
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var found map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		line := bytes.TrimPrefix(sc.Bytes(), []byte("data: "))
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["method"] == nil && m["id"] == float64(id) {
			found = m
		}
	}
	if found == nil {
		t.Fatalf("%s: no response in %s", method, b)
	}
	return found
}

func taskResult(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	r, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("want a result, got %v", m)
	}
	return r
}

func taskErrorCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}
