package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Regression (issue 14, test/robustness silent_worker, seed
// 1796124566952747474): a call placed on a worker that had just gone
// silent, before its lease ran out, was failed by the janitor within the
// TTL, but its client was answered only 15 s later. The gateway had no
// connection to that worker yet, and a fresh one to a silent peer never
// completes its handshake: Execute waited for it, and the quiet-stream
// probe started only once Execute returned. The probe now watches from
// before the stream opens.
func TestCallToANewlySilentWorkerIsAnswered(t *testing.T) {
	const ttl = 3 * time.Second
	st := newSilentStack(t, ttl)
	url, sid := st.url, st.sid

	// Silent before the gateway ever dialled the worker; the coordinator
	// still places calls on it until its lease runs out.
	st.silence(t)
	silenced := time.Now()
	call := startCall(t, url, sid, 1, "echo", map[string]any{"text": "hi"}, nil)
	var r streamResult
	select {
	case r = <-call:
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("the client had no answer %v after the silence (lease TTL %v)", ttl+10*time.Second, ttl)
	}
	t.Logf("answered %v after the silence (lease TTL %v)", time.Since(silenced).Round(time.Millisecond), ttl)
	if r.err != nil || !hasResponse(r.msgs) || !strings.Contains(fmt.Sprint(r.msgs), "isError:true") {
		t.Fatalf("the client got %v (%v), want an error result", r.msgs, r.err)
	}
	st.wantOneWorkerLost(t)
}
