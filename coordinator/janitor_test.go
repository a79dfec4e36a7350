package coordinator_test

import (
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// Regression (issue 14): one call record that did not decode stopped the
// janitor's round, and every lost call after it stayed open. The janitor
// now logs and skips it.
func TestJanitorSkipsACorruptRecord(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.begin(t, e.c, key("conn:janitor", num(1)), "hold")
	b := e.begin(t, e.c, key("conn:janitor", num(2)), "hold")
	bad, good := a, b
	if b.CallId < a.CallId { // the janitor reads owners in key order: break the first
		bad, good = b, a
	}
	if _, err := e.cli.Put(t.Context(), prefix+"calls/"+bad.CallId, "{not json"); err != nil {
		t.Fatal(err)
	}
	e.w.Stop() // its lease is revoked: both calls are the janitor's
	testcluster.WaitFor(t, "the janitor to fail the intact call", func() bool {
		return e.state(t, good.CallId) == pb.CallState_CALL_STATE_FAILED
	})
	if got := outcomes(e.audits(t, good.CallId)); len(got) != 1 || got[0] != "failed" {
		t.Fatalf("audit = %v, want [failed]", got)
	}
}
