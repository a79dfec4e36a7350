package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// stdioConn is a client speaking raw JSON lines to ServeStdio.
type stdioConn struct {
	in    *io.PipeWriter
	lines chan map[string]any
	done  chan error
}

func serveStdio(t *testing.T, g *gateway.Gateway) *stdioConn {
	t.Helper()
	return serveStdioVia(t, g, func(w io.Writer) io.Writer { return w })
}

// serveStdioVia is serveStdio with the gateway's stdout passed through
// wrap first.
func serveStdioVia(t *testing.T, g *gateway.Gateway, wrap func(io.Writer) io.Writer) *stdioConn {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &stdioConn{in: inW, lines: make(chan map[string]any, 1000), done: make(chan error, 1)}
	go func() { // owned: ends when stdin is closed (below, or in the test)
		c.done <- g.ServeStdio(context.Background(), inR, wrap(outW))
		outW.Close()
	}()
	go func() { // owned: ends when ServeStdio closes stdout
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("gateway wrote a non-JSON line: %q", sc.Text())
				continue
			}
			c.lines <- m
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		inW.Close()
		<-c.done
	})
	return c
}

// initialize opens the MCP session at version, declaring no capabilities.
func (c *stdioConn) initialize(t *testing.T, version string) {
	t.Helper()
	c.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := c.next(t); m["result"] == nil {
		t.Fatalf("initialize = %v", m)
	}
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

func (c *stdioConn) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// next returns the next message that is not a gateway ping.
func (c *stdioConn) next(t *testing.T) map[string]any {
	t.Helper()
	for {
		select {
		case m := <-c.lines:
			if m["method"] == "ping" {
				continue
			}
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no message from the gateway")
			return nil
		}
	}
}

// Over stdio: a client cancel naming the id of a gateway-issued ping does
// nothing; 1 and "1" are different requests; malformed cancels are ignored
// without reply and without an etcd write; the connection keeps working;
// and EOF cancels what is still running.
func TestStdioCancellationRules(t *testing.T) {
	st := newStack(t, stackOptions{})
	g := gateway.New(gateway.Options{Coordinator: st.conn, PingInterval: 20 * time.Millisecond})
	t.Cleanup(func() { g.Close() })
	c := serveStdio(t, g)
	c.initialize(t, "2025-06-18")

	// The gateway pings; the client cancels the ping's id: nothing happens.
	var ping map[string]any
	for m := range c.lines {
		if m["method"] == "ping" {
			ping = m
			break
		}
	}
	pingID, _ := json.Marshal(ping["id"])
	before := st.revision(t)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+string(pingID)+`}}`)
	c.send(t, `{"jsonrpc":"2.0","id":`+string(pingID)+`,"result":{}}`) // the client answers the ping

	// Call 1 runs; a cancel naming "1" (a string) must not touch it.
	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":0.3,"steps":1}}}`)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"1","reason":"wrong type"}}`)
	// Malformed cancellations, all ignored without a reply.
	for _, bad := range []string{
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"` + strings.Repeat("x", 257) + `"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1.5}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99,"reason":"\u001b[2J\u0000"}}`,
	} {
		c.send(t, bad)
	}
	m := c.next(t)
	if m["id"] != float64(1) || m["result"] == nil {
		t.Fatalf("call 1 should complete untouched; got %v", m)
	}
	// Exactly call 1's Begin (record, index, owner, running) and Complete
	// (record, audit, owner and running deleted).
	if keys := st.callWrites(t, before, st.revision(t)); len(keys) != 8 {
		t.Fatalf("etcd writes %v, want the 8 of call 1's Begin and Complete", keys)
	}
	// The connection still works.
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := c.next(t); m["id"] != float64(2) || m["result"] == nil {
		t.Fatalf("ping = %v", m)
	}
	// EOF cancels what is still running, with the reason recorded.
	c.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":30,"steps":300}}}`)
	waitFor(t, "call 3 to run", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && resp.Workers[0].InFlight == 1
	})
	c.in.Close()
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	c.done <- nil // for the cleanup
	for m := range c.lines {
		if m["id"] == float64(3) {
			t.Fatalf("call 3 was answered after EOF: %v", m)
		}
	}
	var found bool
	for _, as := range st.allAudits(t) {
		if as[0].Tool == "sleep" && string(as[0].RequestID) == "3" {
			found = true
			if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "disconnect" {
				t.Fatalf("call 3 audit = %+v", as[0])
			}
		}
	}
	if !found {
		t.Fatal("no audit record for call 3")
	}
}

// heldWriter holds the first write that contains marker until release is
// closed, and closes held when it starts holding.
type heldWriter struct {
	w       io.Writer
	marker  []byte
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, h.marker) {
		h.once.Do(func() {
			close(h.held)
			<-h.release
		})
	}
	return h.w.Write(p)
}

// A client's cancel that arrives after its call's result was queued, while
// the response is still being written (the call has not yet left the
// session), is a late cancel like one a moment later: completion won, the
// result goes out, and the cancel is audited once as cancel_lost.
func TestLateCancelWhileTheResultIsWritten(t *testing.T) {
	st := newStack(t, stackOptions{})
	g := gateway.New(gateway.Options{Coordinator: st.conn, PingInterval: time.Hour, WriteTimeout: time.Minute})
	t.Cleanup(func() { g.Close() })
	h := &heldWriter{marker: []byte(`"id":1,"result"`), held: make(chan struct{}), release: make(chan struct{})}
	c := serveStdioVia(t, g, func(w io.Writer) io.Writer { h.w = w; return h })
	c.initialize(t, "2025-11-25")
	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	<-h.held
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"too late"}}`)
	as := awaitEchoAudits(t, st, "1")
	close(h.release)
	if m := c.next(t); m["id"] != float64(1) || m["result"] == nil {
		t.Fatalf("call 1 = %v, want its result", m)
	}
	if as[0].Outcome != "completed" || as[1].Outcome != "cancel_lost" || as[1].Reason != "too late" || as[1].Initiator != "client" {
		t.Fatalf("audit = %+v, %+v", as[0], as[1])
	}
	// A cancel after the call has left the connection is audited the same
	// way, though no other replica can hold a call of a stdio connection.
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"again"}}}`)
	if m := c.next(t); m["id"] != float64(2) || m["result"] == nil {
		t.Fatalf("call 2 = %v, want its result", m)
	}
	waitFor(t, "call 2 to leave the connection", func() bool {
		return metric(t, g, "mcpcancel_gateway_calls_in_flight") == 0
	})
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"later still"}}`)
	as = awaitEchoAudits(t, st, "2")
	if as[1].Outcome != "cancel_lost" || as[1].Reason != "later still" {
		t.Fatalf("call 2 audit = %+v, %+v", as[0], as[1])
	}
}

// awaitEchoAudits waits for the echo call with this request id to have
// two audit records, its decision and a cancel_lost, and returns them.
func awaitEchoAudits(t *testing.T, st *stack, id string) []*coordinator.AuditRecord {
	t.Helper()
	var as []*coordinator.AuditRecord
	waitFor(t, "the cancel_lost record of call "+id, func() bool {
		for _, recs := range st.allAudits(t) {
			if recs[0].Tool == "echo" && string(recs[0].RequestID) == id && len(recs) == 2 {
				as = recs
				return true
			}
		}
		return false
	})
	return as
}

// No line of a stdio connection waits for another: while a tasks/result
// long-polls a running task, a ping and a call on the same connection are
// answered, and a cancel of a running call lands (its audit says so), all
// before the long poll ends. The task is then cancelled, which ends it.
func TestStdioLongPollHoldsUpNothing(t *testing.T) {
	st := newStack(t, stackOptions{})
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "fixtures"}, demo.RegisterFixtures)
	st.waitForTool(t, "slow_compute")
	g := gateway.New(gateway.Options{Coordinator: st.conn, PingInterval: time.Hour})
	t.Cleanup(func() { g.Close() })
	c := serveStdio(t, g)
	c.initialize(t, "2025-11-25")

	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_compute","arguments":{"seconds":60},"task":{}}}`)
	created := c.next(t)
	taskID, _ := created["result"].(map[string]any)["task"].(map[string]any)["taskId"].(string)
	if taskID == "" {
		t.Fatalf("CreateTaskResult = %v", created)
	}
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":"`+taskID+`"}}`)
	c.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":60,"steps":600}}}`)
	c.send(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	c.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	for _, want := range []float64{4, 5} {
		if m := c.next(t); m["id"] != want || m["result"] == nil {
			t.Fatalf("got %v, want the answer to request %v before the long poll's", m, want)
		}
	}
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"changed my mind"}}`)
	waitFor(t, "call 3's cancellation", func() bool {
		for _, as := range st.allAudits(t) {
			if as[0].Tool == "sleep" && string(as[0].RequestID) == "3" {
				return as[0].Outcome == "cancelled" && as[0].Initiator == "client"
			}
		}
		return false
	})
	c.send(t, `{"jsonrpc":"2.0","id":6,"method":"tasks/cancel","params":{"taskId":"`+taskID+`"}}`)
	got := map[float64]map[string]any{}
	for len(got) < 2 {
		m := c.next(t)
		if m["method"] == "notifications/tasks/status" {
			continue
		}
		id, _ := m["id"].(float64)
		if id != 2 && id != 6 {
			t.Fatalf("got %v, want only the answers to the long poll and the task's cancel (never call 3's)", m)
		}
		got[id] = m
	}
	if st := got[6]["result"].(map[string]any)["status"]; st != "cancelled" {
		t.Fatalf("tasks/cancel = %v", got[6])
	}
}

// A cancel read right behind its request, before the call has registered
// (each request runs on its own goroutine), still cancels it: the call
// picks it up as it registers. None of the calls is answered.
func TestStdioCancelRightBehindItsRequest(t *testing.T) {
	st := newStack(t, stackOptions{})
	g := gateway.New(gateway.Options{Coordinator: st.conn, PingInterval: time.Hour})
	t.Cleanup(func() { g.Close() })
	c := serveStdio(t, g)
	c.initialize(t, "2025-11-25")
	const n = 20
	for i := range n {
		id := strconv.Itoa(100 + i)
		c.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":60,"steps":600}}}`+"\n"+
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`,"reason":"right behind"}}`)
	}
	waitFor(t, "every call's cancellation", func() bool {
		cancelled := 0
		for _, as := range st.allAudits(t) {
			if as[0].Tool == "sleep" && as[0].Outcome == "cancelled" && as[0].Initiator == "client" && as[0].Reason == "right behind" {
				cancelled++
			}
		}
		return cancelled == n
	})
	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if m := c.next(t); m["id"] != float64(1) {
		t.Fatalf("got %v, want only the ping's answer (no cancelled call is answered)", m)
	}
}
