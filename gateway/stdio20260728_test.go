package gateway_test

import (
	"encoding/json"
	"fmt"
	"testing"
)

// Over stdio, a 2026-07-28 subscriptions/listen is acknowledged at once,
// carries tools list_changed tagged with its id, and ends when the
// client's notifications/cancelled names it; another listen goes on.
func TestStdioListen(t *testing.T) {
	g, _ := fixtureGateway(t)
	c := serveStdio(t, g)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	listen := func(id string) {
		t.Helper()
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"subscriptions/listen","params":{%s,"notifications":{"toolsListChanged":true}}}`, id, meta))
		if m := c.next(t); m["method"] != "notifications/subscriptions/acknowledged" || subscriptionOf(m) != id {
			t.Fatalf("listen %s: first message %v; want its acknowledgement", id, m)
		}
	}
	// trigger changes the tool list and returns the list_changed
	// notifications that follow, by subscription, up to one for want.
	trigger := func(callID int, want string) []string {
		t.Helper()
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"test_trigger_tool_change","arguments":{},%s}}`, callID, meta))
		var subs []string
		for answered := false; !answered || len(subs) == 0 || subs[len(subs)-1] != want; {
			m := c.next(t)
			switch {
			case m["method"] == "notifications/tools/list_changed":
				subs = append(subs, subscriptionOf(m))
			case m["id"] == float64(callID):
				answered = true
			default:
				t.Fatalf("unexpected %v", m)
			}
		}
		return subs
	}
	listen("listen:0")
	if subs := trigger(1, "listen:0"); len(subs) != 1 {
		t.Fatalf("list_changed for %v; want listen:0 once", subs)
	}
	listen("listen:1")
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"listen:0",`+meta+`}}`)
	// Copies go out in id order, so listen:0's would come first.
	if subs := trigger(2, "listen:1"); len(subs) != 1 {
		t.Fatalf("after listen:0 was cancelled, list_changed for %v; want listen:1 only", subs)
	}
}

func subscriptionOf(m map[string]any) string {
	p, _ := m["params"].(map[string]any)
	meta, _ := p["_meta"].(map[string]any)
	id, _ := json.Marshal(meta["io.modelcontextprotocol/subscriptionId"])
	var s string
	json.Unmarshal(id, &s)
	return s
}
