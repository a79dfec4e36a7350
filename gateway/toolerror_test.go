package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// A tool's own error (an isError result) completes the call: its client
// gets the result, and the audit tells it from a success as tool_error.
func TestToolErrorIsAuditedApart(t *testing.T) {
	st := newStack(t, stackOptions{})
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "w2"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "refuse", Description: "always refuses"}, func(context.Context, *worker.Call) (*worker.Result, error) {
			return worker.Errorf("no, thank you"), nil
		})
	})
	st.waitForTool(t, "refuse")
	sid := openSession(t, st.urls[0])
	r := <-startCall(t, st.urls[0], sid, 1, "refuse", map[string]any{}, nil)
	if !hasResponse(r.msgs) || !strings.Contains(fmt.Sprint(r.msgs), "no, thank you") || !strings.Contains(fmt.Sprint(r.msgs), "isError:true") {
		t.Fatalf("the client got %v", r.msgs)
	}
	r2 := <-startCall(t, st.urls[0], sid, 2, "echo", map[string]any{"text": "fine"}, nil)
	if !hasResponse(r2.msgs) {
		t.Fatalf("echo: %v", r2.msgs)
	}
	as := st.audits(t, "session:"+sid)
	if a := as["1"]; len(a) != 1 || a[0].Outcome != "tool_error" {
		t.Fatalf("audit of the refused call = %+v", a)
	}
	if a := as["2"]; len(a) != 1 || a[0].Outcome != "completed" {
		t.Fatalf("audit of the echo = %+v", a)
	}
}
