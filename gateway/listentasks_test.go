package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// listenTaskCaps are client capabilities declaring the tasks extension.
var listenTaskCaps = map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}

// TestListenTaskNotifications: a 2026-07-28 listen naming a task hears
// notifications/tasks, tagged with its id, each carrying what tasks/get
// would answer: the task as it is once acknowledged, then each change of
// its status, whichever gateway replica made it. A task that is not the
// caller's is left out of the acknowledgement, and a listen naming tasks
// without declaring the extension is refused with -32021.
func TestListenTaskNotifications(t *testing.T) {
	h, conn, _ := researchStack(t)
	gA, urlA := testcluster.StartGateway(t, conn, gateway.Options{})
	_, urlB := testcluster.StartGateway(t, conn, gateway.Options{})
	create := func() string {
		t.Helper()
		status, msgs := post26(t, urlA, request(1, "tools/call", map[string]any{"name": "research", "arguments": map[string]any{}, "_meta": envelope(listenTaskCaps)}),
			headers2026("tools/call", "research"))
		var r struct {
			ResultType string `json:"resultType"`
			TaskID     string `json:"taskId"`
		}
		if status != http.StatusOK || len(msgs) == 0 || json.Unmarshal(msgs[len(msgs)-1].Result, &r) != nil || r.ResultType != "task" {
			t.Fatalf("creating a task: status %d, %+v", status, msgs)
		}
		<-h.started
		return r.TaskID
	}
	status := func(l *httpListen, want string) map[string]any {
		t.Helper()
		m := l.next(t)
		var p map[string]any
		json.Unmarshal(m.Params, &p)
		if m.Method != "notifications/tasks" || p["status"] != want || subscriptionID(m) != `"`+l.id+`"` {
			t.Fatalf("listen %s: got %s %s; want notifications/tasks %s tagged with its id", l.id, m.Method, m.Params, want)
		}
		return p
	}

	id1 := create()
	code, msgs := post26(t, urlA, request("l0", "subscriptions/listen", map[string]any{"_meta": envelope(map[string]any{}), "notifications": map[string]any{"taskIds": []string{id1}}}),
		headers2026("subscriptions/listen", ""))
	wantError(t, code, msgs, http.StatusBadRequest, -32021, `"l0"`)

	l1, ack := openListen(t, urlA, "l1", map[string]any{"taskIds": []string{id1, "0123456789abcdef0123456789abcdef"}}, listenTaskCaps)
	if got, _ := json.Marshal(ack["taskIds"]); string(got) != `["`+id1+`"]` {
		t.Fatalf("acknowledged %s; want only %s", got, id1)
	}
	status(l1, "working")
	if code, msgs := post26(t, urlB, request(2, "tasks/cancel", map[string]any{"taskId": id1, "_meta": envelope(listenTaskCaps)}), headers2026("tasks/cancel", id1)); code != http.StatusOK || msgs[0].Result == nil {
		t.Fatalf("tasks/cancel through B: %d %+v", code, msgs)
	}
	status(l1, "cancelled")
	h.release <- struct{}{}

	// A task that completes: its result is inline.
	id2 := create()
	l2, _ := openListen(t, urlB, "l2", map[string]any{"taskIds": []string{id2}}, listenTaskCaps)
	status(l2, "working")
	h.release <- struct{}{}
	done := status(l2, "completed")
	text := done["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	if text != "work of "+id2+" done" {
		t.Fatalf("completed task's result %v", done["result"])
	}

	// Over stdio, the same: a third task, followed by a listen on a
	// stdio connection to A, completes.
	id3 := create()
	sc := serveStdio(t, gA)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`
	sc.send(t, `{"jsonrpc":"2.0","id":"l3","method":"subscriptions/listen","params":{`+meta+`,"notifications":{"taskIds":["`+id3+`"]}}}`)
	for _, want := range []string{"notifications/subscriptions/acknowledged", "working", "completed"} {
		m := sc.next(t)
		p, _ := m["params"].(map[string]any)
		if subscriptionOf(m) != "l3" || (m["method"] != want && (m["method"] != "notifications/tasks" || p["status"] != want)) {
			t.Fatalf("stdio listen: got %v; want %s tagged l3", m, want)
		}
		if want == "working" {
			h.release <- struct{}{}
		}
	}
}
