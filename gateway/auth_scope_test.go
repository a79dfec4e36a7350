package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
)

func workerInFlight(st *stack) func() int64 {
	return func() int64 {
		resp, err := st.c.ListWorkers(context.Background(), nil)
		if err != nil || len(resp.Workers) != 1 {
			return -1
		}
		return int64(resp.Workers[0].InFlight)
	}
}

// Client B cannot cancel client A's call by id: not with the same id in
// its own session, not with a guessed session id, not as another
// principal holding A's session id; "1" is not 1; and two 2026-07-28
// requests both using id 1 never collide. Only A's own cancel wins.
func TestCannotCancelAnotherClientsCall(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(file, []byte("tok-a alice\ntok-b bob\n"), 0o600)
	tokens, err := auth.NewTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	st := newStack(t, stackOptions{gw: gateway.Options{Authenticator: tokens}})
	url := st.urls[0]
	session := func(token string) string {
		resp, _ := authedPost(t, url, token, "", initBody)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("initialize: %d", resp.StatusCode)
		}
		return resp.Header.Get("Mcp-Session-Id")
	}
	sa, sb, sb2 := session("tok-a"), session("tok-b"), session("tok-a")
	done := startCallAs(t, url, "tok-a", sa, 1, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	waitRecorded(t, st.c, "session:"+sa, 1)
	before := st.revision(t)
	attempts := []struct {
		name, token, session string
		id                   any
		want                 int // HTTP status of the cancel POST
	}{
		{"same id, B's session", "tok-b", sb, 1, http.StatusAccepted},
		{"same id, another session of A's principal", "tok-a", sb2, 1, http.StatusAccepted},
		{"guessed session id", "tok-b", "0123456789abcdef0123456789abcdef", 1, http.StatusNotFound},
		{"B with A's session id", "tok-b", sa, 1, http.StatusNotFound},
		{`"1" instead of 1, in A's own session`, "tok-a", sa, "1", http.StatusAccepted},
	}
	for _, a := range attempts {
		if resp, body := authedPost(t, url, a.token, a.session, cancelMsg(a.id, "hostile")); resp.StatusCode != a.want {
			t.Errorf("%s: %d %s, want %d", a.name, resp.StatusCode, body, a.want)
		}
	}
	if keys := st.callWrites(t, before, st.revision(t)); len(keys) > 0 {
		t.Fatalf("cancels that named nothing wrote to etcd: %v", keys)
	}
	select {
	case r := <-done:
		t.Fatalf("A's call ended after others' cancels: %v", r.msgs)
	default:
	}
	if n := workerInFlight(st)(); n != 1 {
		t.Fatalf("in flight on the worker: %d, want A's call", n)
	}
	authedPost(t, url, "tok-a", sa, cancelMsg(1, "mine"))
	if r := <-done; hasResponse(r.msgs) {
		t.Fatalf("A's own cancel did not win: %v", r.msgs)
	}
	as := st.audits(t, "session:"+sa)["1"]
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Principal != "alice" || as[0].Reason != "mine" {
		t.Fatalf("audit of A's call = %+v", as)
	}

	// 2026-07-28: each request is its own scope, so two clients' id 1
	// run side by side and each completes.
	rev2026 := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	var wg sync.WaitGroup
	bodies := make([]string, 2)
	for i, token := range []string{"tok-a", "tok-b"} {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(fmt.Sprintf(rev2026, token)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", "tools/call")
			req.Header.Set("Mcp-Name", "echo")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			bodies[i] = string(b)
		})
	}
	wg.Wait()
	for i, token := range []string{"tok-a", "tok-b"} {
		if !strings.Contains(bodies[i], token) {
			t.Errorf("2026-07-28 call of %s with id 1: %q", token, bodies[i])
		}
	}
}

// The per-scope limit: the 257th concurrent call of one session fails
// with a clear error, and another session's call still runs.
func TestScopeLimit(t *testing.T) {
	st := newStack(t, stackOptions{})
	url, g := st.urls[0], st.gateways[0]
	full, other := openSession(t, url), openSession(t, url)
	const limit = 256 // the default
	var calls []<-chan streamResult
	// In batches, each running on the worker before the next starts: 256
	// Begins at once overload a coordinator on a busy machine under -race.
	const batch = 32
	for i := range limit {
		calls = append(calls, startCall(t, url, full, i+1, "sleep", map[string]any{"seconds": 120, "steps": 1}, nil))
		if (i+1)%batch == 0 {
			pollUntil(t, 2*time.Minute, fmt.Sprintf("%d calls running", i+1), func() bool { return workerInFlight(st)() == int64(i+1) })
		}
	}
	if n := metric(t, g, "mcpcancel_gateway_calls_in_flight"); n != limit {
		t.Fatalf("gateway in flight: %v, want %d", n, limit)
	}
	r := <-startCall(t, url, full, limit+1, "echo", map[string]any{"text": "one too many"}, nil)
	if len(r.msgs) != 1 || !strings.Contains(fmt.Sprint(r.msgs[0]["error"]), "too many calls in flight in this session (limit 256)") {
		t.Fatalf("the 257th call: %v", r.msgs)
	}
	if r := <-startCall(t, url, other, 1, "echo", map[string]any{"text": "unaffected"}, nil); !strings.Contains(fmt.Sprint(r.msgs), "unaffected") {
		t.Fatalf("another session's call: %v", r.msgs)
	}
	// The 256 are untouched: still running, then cancelled with their
	// session.
	if n := metric(t, g, "mcpcancel_gateway_calls_in_flight"); n != limit {
		t.Fatalf("in flight after the refusal: %v", n)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", full)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	for _, c := range calls {
		if r := <-c; hasResponse(r.msgs) {
			t.Fatalf("a call answered after its session was deleted: %v", r.msgs)
		}
	}
}

// pollUntil checks cond every 20ms until it holds, failing after limit.
func pollUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// floodConns is how many connections a flood is sent over.
const floodConns = 1

// floodClient keeps enough idle connections for the flooders.
var floodClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}

func floodPost(ctx context.Context, url, session, body string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := floodClient.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// flood sends n cancels for ids nobody uses from session, over workers
// connections, and returns the first error.
func flood(ctx context.Context, url, session string, n, workers int) error {
	errs := make(chan error, workers)
	for w := range workers {
		go func() { // owned: flood waits for every worker below
			var err error
			for i := w; i < n && err == nil; i += workers {
				err = floodPost(ctx, url, session, cancelMsg(1_000_000+i, "bogus"))
			}
			errs <- err
		}()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// 10,000 cancels naming nothing cost no etcd write, and reach the
// coordinator no more often than the session's lookup budget allows; and
// while such a flood runs, client A's own cancels still win. The time
// from A's cancel to its stream ending is logged (p50, p99), not
// asserted: a busy 2-core machine must not fail the test.
//
// The flood is sent over one connection, one cancel after another: the
// lookup budget is checked before a lookup and spent after it, so
// concurrent cancels of one session can overdraw it by one lookup each.
func TestCancelFlood(t *testing.T) {
	st := newStack(t, stackOptions{})
	url, g := st.urls[0], st.gateways[0]
	flooder, victim := openSession(t, url), openSession(t, url)

	before, began := st.revision(t), time.Now()
	if err := flood(t.Context(), url, flooder, 10_000, floodConns); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	// A lookup waits, bounded, for a record that may be on its way
	// (another replica's call, begun beside its work) after its POST
	// was answered.
	waitFor(t, "every lookup to be answered", func() bool {
		return metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "ignored_rate_limited")+
			metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "unknown") >= 10_000
	})
	// Cancels that found no token wait for one (cancel.go), so lookups go
	// on past the flood: the budget is the tokens of the whole time.
	answered := time.Since(began)
	if keys := st.callWrites(t, before, st.revision(t)); len(keys) > 0 {
		t.Fatalf("10,000 bogus cancels wrote to etcd: %v", keys)
	}
	limited := metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "ignored_rate_limited")
	looked := metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "unknown")
	t.Logf("flood of 10000 in %v, answered in %v: %v looked up at the coordinator, %v rate limited", took, answered, looked, limited)
	if budget := 1.1 * (50 + 20*answered.Seconds() + floodConns); looked > budget || looked+limited != 10_000 {
		t.Fatalf("%v of 10000 bogus cancels looked up in %v (budget %.0f), %v rate limited", looked, answered, budget, limited)
	}

	ctx, stop := context.WithCancel(t.Context())
	flooding := make(chan error, 1)
	go func() { flooding <- flood(ctx, url, flooder, 1<<30, floodConns) }() // owned: stopped and awaited below
	const rounds = 100
	var lat []time.Duration
	for i := range rounds {
		done := startCall(t, url, victim, i+1, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
		waitFor(t, "the victim's call to run", func() bool { return workerInFlight(st)() == 1 })
		start := time.Now()
		post(t, url, victim, cancelMsg(i+1, "mine"))
		r := <-done
		lat = append(lat, time.Since(start))
		if hasResponse(r.msgs) {
			t.Fatalf("round %d: the victim's cancel lost during the flood: %v", i, r.msgs)
		}
		waitFor(t, "the worker to stop the call", func() bool { return workerInFlight(st)() == 0 })
	}
	stop()
	if err := <-flooding; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	for i := range rounds {
		if as := st.audits(t, "session:"+victim)[fmt.Sprint(i+1)]; len(as) != 1 || as[0].Outcome != "cancelled" {
			t.Fatalf("victim's call %d: audit %+v", i+1, as)
		}
	}
	slices.Sort(lat)
	t.Logf("victim's cancel to stream end during a flood, %d rounds: p50 %v, p99 %v, max %v",
		rounds, lat[rounds/2], lat[(rounds*99+99)/100-1], lat[rounds-1])
}
