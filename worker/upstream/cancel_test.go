package upstream_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

const longOp = "trigger-long-running-operation"

// longOpArgs make a step every 1.5 s: the client cancels after the second,
// and the cancel's trip to the coordinator fits well before the third even
// on a loaded machine (progress sent before the cancel is decided may
// still reach the client; the gate closes when it is).
const longOpArgs = `{"duration":6,"steps":4}`

// TestStdioCancelAfterTwoProgress: a client cancels server-everything's
// long-running operation after two progress notifications. The server
// receives notifications/cancelled naming the id the adapter gave the
// call, ignores it and keeps sending progress; the client gets no response
// and no more progress; the audit has the cancelled record.
func TestStdioCancelAfterTwoProgress(t *testing.T) {
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd}, longOp, "echo")

	evs := runClient(t, "call2025.mjs", "--url", st.url, "--tool", longOp,
		"--args", longOpArgs, "--cancel-after-progress", "2", "--linger-ms", "8000")
	checkCancelled(t, evs)

	msgs := tp.messages(t)
	up := findCall(msgs, longOp, `"steps":4`)
	if up == nil {
		t.Fatal("the server never received the tools/call")
	}
	if got := cancelled(msgs); len(got) != 1 || got[0] != string(up.ID) {
		t.Fatalf("the server received notifications/cancelled for %v; want exactly one, for its own id %s", got, up.ID)
	}
	// The server ignored the cancel: it went on to its last step while the
	// client was still listening.
	if ps := progressSent(msgs, up.Params.Meta.Token); len(ps) != 4 {
		t.Fatalf("the server sent progress %v for the call; want all 4 steps (it ignores cancellation)", ps)
	}
	t.Logf("upstream id %s, cancelled %v, progress the server sent %v", up.ID, cancelled(msgs), progressSent(msgs, up.Params.Meta.Token))
	checkAudit(t, st, longOp, "cancelled", "client")
}

// checkCancelled checks a call2025.mjs run that cancelled its call: two
// progress notifications, the cancel, and nothing after it.
func checkCancelled(t *testing.T, evs []event) {
	t.Helper()
	if n := count(evs, "cancel_sent"); n != 1 {
		t.Fatalf("the client did not cancel (cancel_sent %d times): %s", n, summary(evs))
	}
	if n := count(evs, "progress"); n != 2 {
		t.Errorf("the client saw %d progress notifications, want 2: %s", n, summary(evs))
	}
	for _, e := range evs {
		switch e.Event {
		case "late":
			t.Errorf("a %s reached the client after its cancel: %s", e.Kind, e.Message)
		case "result":
			t.Errorf("the client got a result after cancelling: %s", e.Result)
		}
	}
}

func checkAudit(t *testing.T, st *stack, tool, outcome, initiator string) {
	t.Helper()
	recs := st.audits(t, tool)
	if len(recs) != 1 || recs[0].Outcome != outcome || recs[0].Initiator != initiator {
		b, _ := json.Marshal(recs)
		t.Fatalf("audit of %s: %s; want one record, %s by %s", tool, b, outcome, initiator)
	}
}

// summary lists the events but wire ones, for failure messages.
func summary(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Event != "wire" {
			j, _ := json.Marshal(e)
			b.Write(j)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
