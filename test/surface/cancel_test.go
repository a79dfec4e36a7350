package surface

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// TestReadCancelledMidFlight: a client cancels a resources/read of a slow
// resource of a fronted server while the server reads it, in each era
// (2025-11-25: notifications/cancelled on its own POST; 2026-07-28:
// closing the request's stream). Exactly one decision is audited
// (cancelled by the client, method resources/read, target the URI),
// nothing answers the request, and the fronted server is told: it
// receives notifications/cancelled and its read's context ends.
func TestReadCancelledMidFlight(t *testing.T) {
	for _, era := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(era, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "slow.log")
			s := startFronting(t, upstream.Options{Command: []string{os.Args[0]}, Env: []string{slowServerEnv + "=" + log}})
			var body <-chan []byte
			if era == "2025-11-25" {
				session := initialize(t, s.url)
				body, _ = postStream(t, s.url, session, nil, `{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"`+slowURI+`"}}`)
				waitLog(t, log, "read started")
				testcluster.PostMCP(t, s.url, "", session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"changed my mind"}}`)
			} else {
				var stop context.CancelFunc
				body, stop = postStream(t, s.url, "", map[string]string{
					"Mcp-Protocol-Version": era, "Mcp-Method": "resources/read", "Mcp-Name": slowURI,
				}, `{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"`+slowURI+`","_meta":{`+
					`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
				waitLog(t, log, "read started")
				stop() // closing the stream is the cancellation
			}
			select {
			case b := <-body:
				if bytes.Contains(b, []byte(`"id":7`)) {
					t.Errorf("the cancelled read was answered: %s", b)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the cancelled read's stream did not end")
			}
			waitLog(t, log, "cancelled {")
			waitLog(t, log, "read stopped")
			var recs []*coordinator.AuditRecord
			testcluster.WaitFor(t, "the read's audit record", func() bool {
				recs = nil
				for _, rs := range testcluster.Audits(t, s.etcd) {
					recs = append(recs, rs...)
				}
				return len(recs) > 0
			})
			if len(recs) != 1 {
				t.Fatalf("%d audit records; want one decision: %+v", len(recs), recs)
			}
			r := recs[0]
			if r.Method != "resources/read" || r.Tool != slowURI || r.Outcome != "cancelled" || r.Initiator != "client" {
				t.Errorf("audit record %+v; want resources/read of %s cancelled by the client", r, slowURI)
			}
		})
	}
}

// initialize opens a 2025-11-25 session and returns its id.
func initialize(t *testing.T, url string) string {
	t.Helper()
	resp, _ := testcluster.PostMCP(t, url, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"surface-test","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if session == "" {
		t.Fatalf("initialize answered %s without a session", resp.Status)
	}
	testcluster.PostMCP(t, url, "", session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return session
}

// postStream POSTs a request whose answer streams, and returns what the
// stream carried once it ends (stop ends it from this side).
func postStream(t *testing.T, url, session string, headers map[string]string, body string) (<-chan []byte, context.CancelFunc) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	t.Cleanup(stop)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	out := make(chan []byte, 1)
	go func() { // owned: ends with the response, which stop or the test's end ends
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- nil
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- b
	}()
	return out, stop
}

// waitLog waits until the slow server's log has a line starting with want.
func waitLog(t *testing.T, file, want string) {
	t.Helper()
	testcluster.WaitFor(t, "the slow server to log "+want, func() bool {
		b, _ := os.ReadFile(file)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, want) {
				return true
			}
		}
		return false
	})
}
