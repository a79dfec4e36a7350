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
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

const researchTool = "simulate-research-query"

// server-everything's simulate-research-query requires task augmentation.
// Through the gateway, a 2025-11-25 client runs it as a task: the adapter
// offers it as a task tool, calls it upstream as a task of the server's
// own (params.task, then tasks/result), and tasks/result at the gateway
// returns its report. A second task cancelled at the gateway reaches the
// server as tasks/cancel naming the server's task id.
func TestResearchQueryAsTask(t *testing.T) {
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd}, researchTool)
	tools := st.waitTools(t, func(tools map[string]*pb.Tool) bool { return tools[researchTool] != nil })
	if ts := tools[researchTool].GetTaskSupport(); ts != "required" {
		t.Fatalf("the adapter offers %s with task support %q, want required", researchTool, ts)
	}
	session := taskSession(t, st.url)
	if code := taskErrorCode(taskRPC(t, st.url, session, 1, "tools/call", map[string]any{"name": researchTool, "arguments": map[string]any{"topic": "x"}})); code != -32601 {
		t.Fatalf("a plain call of a task-only tool: code %v, want -32601", code)
	}

	created := taskResult(t, taskRPC(t, st.url, session, 2, "tools/call", map[string]any{"name": researchTool, "arguments": map[string]any{"topic": "etcd leases"}, "task": map[string]any{}}))
	id := created["task"].(map[string]any)["taskId"].(string)
	res := taskResult(t, taskRPC(t, st.url, session, 3, "tasks/result", map[string]any{"taskId": id}))
	b, _ := json.Marshal(res)
	if !strings.Contains(string(b), "etcd leases") || res["isError"] == true {
		t.Fatalf("tasks/result: %s", b)
	}

	second := taskResult(t, taskRPC(t, st.url, session, 4, "tools/call", map[string]any{"name": researchTool, "arguments": map[string]any{"topic": "never finished"}, "task": map[string]any{}}))
	id2 := second["task"].(map[string]any)["taskId"].(string)
	// The server must have created its task before the cancel can name it.
	testcluster.WaitFor(t, "the server's second task", func() bool { return len(upstreamTaskIDs(t, tp)) == 2 })
	if st := taskResult(t, taskRPC(t, st.url, session, 5, "tasks/cancel", map[string]any{"taskId": id2}))["status"]; st != "cancelled" {
		t.Fatalf("tasks/cancel: %v", st)
	}
	theirs := upstreamTaskIDs(t, tp)[1]
	testcluster.WaitFor(t, "tasks/cancel at the server", func() bool {
		return wireHas(t, tp, `"method":"tasks/cancel"`, theirs)
	})
	if cancelled := wireHas(t, tp, `"method":"notifications/cancelled"`, ""); cancelled {
		t.Error("the server was sent notifications/cancelled for a task; a task is cancelled with tasks/cancel")
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
