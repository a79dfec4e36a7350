package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// A worker drained during a rolling update, with a 40 s call in flight:
// past its drain timeout the call is cancelled (initiator shutdown), and
// its client, who did not cancel and is still waiting, is answered with an
// error saying so within seconds. Exactly one decision is recorded.
func TestDrainedWorkerAnswersItsClient(t *testing.T) {
	st := newStack(t, stackOptions{})
	st.w.Stop() // the call must land on the worker drained below
	w2 := testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "w2", DrainTimeout: 500 * time.Millisecond}, demo.Register)
	sid := openSession(t, st.urls[0])
	call := startCall(t, st.urls[0], sid, 1, "sleep", map[string]any{"seconds": 40, "steps": 40}, nil)
	waitFor(t, "the call to run on w2", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 1
	})
	drained := time.Now()
	go w2.Stop() // owned: Stop is idempotent and the test's cleanup waits for it
	var r streamResult
	select {
	case r = <-call:
	case <-time.After(10 * time.Second):
		t.Fatal("the drained worker's client got no answer")
	}
	if !hasResponse(r.msgs) || !strings.Contains(fmt.Sprint(r.msgs), "shut down") || !strings.Contains(fmt.Sprint(r.msgs), "isError:true") {
		t.Fatalf("the drained worker's client got %v", r.msgs)
	}
	t.Logf("answered %v after the drain began", time.Since(drained))
	as := st.audits(t, "session:"+sid)["1"]
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "shutdown" {
		t.Fatalf("decisions on the drained call: %+v", as)
	}
}
