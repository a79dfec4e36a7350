package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// A stdio client that stops reading stdout stalls nothing but itself: at
// the write deadline it is cut off, the connection ends, and its call is
// cancelled as a disconnect (its handler sees its context end), while the
// same gateway goes on serving another client.
func TestStdioClientThatStopsReadingIsCutOff(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	st := newStack(t, stackOptions{})
	g := gateway.New(gateway.Options{Coordinator: st.conn, WriteTimeout: writeTimeout})
	t.Cleanup(func() { g.Close() })

	inR, inW := io.Pipe()
	outR, outW := io.Pipe() // unbuffered: a write blocks until the client reads
	served := make(chan error, 1)
	go func() { served <- g.ServeStdio(context.Background(), inR, outW) }() // owned: waited below
	t.Cleanup(func() {
		inW.Close()
		outR.Close() // ends the write the gateway abandoned, if any
	})
	br := bufio.NewReader(outR)
	io.WriteString(inW, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`+"\n")
	if line, err := br.ReadBytes('\n'); err != nil || !bytes.Contains(line, []byte(`"result"`)) {
		t.Fatalf("initialize: %q, %v", line, err)
	}
	// A call with progress every 10 ms; the client reads none of it.
	io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":30,"steps":3000},"_meta":{"progressToken":"p"}}}`+"\n")

	// Meanwhile another client of the same gateway is served as usual.
	other := serveStdio(t, g)
	other.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"still served"}}}`)
	if m := other.next(t); !strings.Contains(mustJSON(m), "still served") {
		t.Fatalf("the other client got %v", m)
	}

	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a client that stopped reading was not cut off")
	}
	var scope string
	for _, as := range st.allAudits(t) {
		if a := as[0]; a.Tool == "sleep" {
			scope = a.Scope
		}
	}
	a := waitForAudit(t, st, scope, "1")
	if a.Outcome != "cancelled" || a.Initiator != "disconnect" || !strings.Contains(a.Reason, "stopped reading") || a.StoppedAt == nil {
		t.Fatalf("audit of the stalled client's call = %+v", a)
	}
}

// An HTTP client that stops reading its call's stream is cut off at the
// write deadline and its call cancelled as a disconnect; meanwhile another
// session's cancel is decided at once, and the gateway's shutdown finishes
// within its grace plus the write deadline.
func TestHTTPClientThatStopsReadingIsCutOff(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	const grace = time.Second
	st := newStack(t, stackOptions{})
	g := gateway.New(gateway.Options{Coordinator: st.conn, WriteTimeout: writeTimeout})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String() + "/mcp"
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- g.ServeHTTP(ctx, smallBuffers{lis}, grace) }() // owned: waited below

	// The stalled client: small socket buffers, and it never reads the
	// body of its call's stream.
	stalled := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	}}}
	sid := openSession(t, url)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":30,"steps":3000},"_meta":{"progressToken":"p"}}}`
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := stalled.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // read nothing

	// Another session's call, cancelled by its client, is decided as
	// usual while that stream is stalled.
	other := openSession(t, url)
	call := startCall(t, url, other, 2, "sleep", map[string]any{"seconds": 30, "steps": 1}, nil)
	waitFor(t, "both calls to run", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && resp.Workers[0].InFlight == 2
	})
	testcluster.PostMCP(t, url, "", other, cancelMsg(2, "changed my mind"))
	if a := waitForAudit(t, st, "session:"+other, "2"); a.Outcome != "cancelled" || a.Initiator != "client" {
		t.Fatalf("the other session's cancel: %+v", a)
	}
	if r := <-call; hasResponse(r.msgs) {
		t.Fatalf("the other session's cancelled call was answered: %v", r.msgs)
	}

	// The stalled call is cut off and cancelled as a disconnect; its
	// handler stopped.
	a := waitForAudit(t, st, "session:"+sid, "1")
	if a.Outcome != "cancelled" || a.Initiator != "disconnect" || !strings.Contains(a.Reason, "stopped reading") || a.StoppedAt == nil {
		t.Fatalf("audit of the stalled client's call = %+v", a)
	}

	// And shutdown is not held up by it.
	begun := time.Now()
	stop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begun); took > grace+writeTimeout+5*time.Second {
		t.Fatalf("shutdown took %v with a %v grace and a %v write deadline", took, grace, writeTimeout)
	}
}

// waitForAudit waits for the decision on request id in scope and returns
// it, once its handler stopped too.
func waitForAudit(t *testing.T, st *stack, scope, id string) *coordinator.AuditRecord {
	t.Helper()
	var got *coordinator.AuditRecord
	waitFor(t, "the decision on request "+id, func() bool {
		for _, a := range st.audits(t, scope)[id] {
			if a.Outcome != "cancel_lost" && a.StoppedAt != nil {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

// smallBuffers gives each accepted connection a small send buffer, so a
// client that stops reading fills it quickly.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
