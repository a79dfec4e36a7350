package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
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
	// The coordinator places calls from its view of the workers, which
	// learns of w1's leaving a watch delivery after it left: a call placed
	// on w1 meanwhile failed as its worker lost and was retried on w2 (seen
	// in CI, two audit records for the call).
	waitFor(t, "the coordinator to place on w2 alone", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].GetName() == "w2"
	})
	sid := openSession(t, st.urls[0])
	// The handler must be running (its first progress seen), not only
	// begun: a drain before the Execute arrives refuses it, and the call
	// ends as its worker's loss instead.
	running := make(chan struct{})
	call := startCallSeen(t, st.urls[0], sid, 1, "sleep", map[string]any{"seconds": 40, "steps": 40}, "p", running)
	<-running
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
		for _, a := range as {
			t.Logf("decision: %+v", *a)
		}
		t.Fatalf("%d decisions on the drained call, want one cancelled by shutdown", len(as))
	}
}

// startCallSeen is startCall with a progress token, closing seen at the
// first progress notification.
func startCallSeen(t *testing.T, url, session string, id any, tool string, args any, token string, seen chan<- struct{}) <-chan streamResult {
	req := callRequest(t, url, "", session, id, tool, args, token)
	out := make(chan streamResult, 1)
	go func() { // owned: the test reads out
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- streamResult{err: err}
			return
		}
		defer resp.Body.Close()
		var msgs []map[string]any
		once := sync.OnceFunc(func() { close(seen) })
		defer once()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var m map[string]any
			if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok && json.Unmarshal(data, &m) == nil {
				msgs = append(msgs, m)
				if m["method"] == "notifications/progress" {
					once()
				}
			}
		}
		out <- streamResult{msgs: msgs}
	}()
	return out
}
