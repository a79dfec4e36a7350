package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A worker blackholed both ways mid-call (no FIN, no RST; keepalive set
// far out of reach, so only the lease and the gateway's probe can act):
// its call is FAILED as worker_lost, and its client, still waiting, gets an
// error within the lease TTL plus 10 s of the silence.
func TestSilentWorkersClientIsAnswered(t *testing.T) {
	const ttl = 3 * time.Second
	st := newSilentStack(t, ttl)
	url, sid := st.url, st.sid
	running := make(chan struct{})
	call := startCallSeen(t, url, sid, 1, "sleep", map[string]any{"seconds": 60, "steps": 1000}, "p", running)
	<-running

	st.silence(t)
	silenced := time.Now()
	var r streamResult
	select {
	case r = <-call:
	case <-time.After(ttl + 10*time.Second):
		t.Fatalf("the silent worker's client had no answer %v after the silence (lease TTL %v)", ttl+10*time.Second, ttl)
	}
	t.Logf("answered %v after the silence (lease TTL %v)", time.Since(silenced).Round(time.Millisecond), ttl)
	if !hasResponse(r.msgs) || !strings.Contains(fmt.Sprint(r.msgs), "lost") || !strings.Contains(fmt.Sprint(r.msgs), "isError:true") {
		t.Fatalf("the silent worker's client got %v", r.msgs)
	}
	st.wantOneWorkerLost(t)
}
