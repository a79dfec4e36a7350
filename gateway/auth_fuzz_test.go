package gateway

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// Whole HTTP requests against a gateway whose coordinator cannot be
// reached (open, with a tokens file, and as an OAuth resource server with
// a policy): any method, headers (session id, protocol version, method
// and name headers, bearer token, content type) and body get an HTTP
// answer without a panic, a JSON answer is valid JSON, and a challenge
// is one Bearer challenge the go-sdk's client parser reads.
func FuzzHTTPRequest(f *testing.F) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there: every coordinator call fails fast
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	tokens := filepath.Join(f.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("tok alice\n"), 0o600)
	tf, err := auth.NewTokenFile(tokens)
	if err != nil {
		f.Fatal(err)
	}
	open := New(Options{Coordinator: conn, CallTimeout: time.Second})
	authed := New(Options{Coordinator: conn, CallTimeout: time.Second, Authenticator: tf})
	oauth := New(Options{Coordinator: conn, CallTimeout: time.Second, Authenticator: tf,
		Auth: &AuthOptions{Resource: "https://mcp.example/mcp", Requests: auth.RateLimit{Rate: 1e6},
			Policy: &authz.ToolPolicy{Required: []string{"mcp"}, Tools: map[string][]string{"echo": {"tools:echo"}}}}})
	f.Cleanup(func() { open.Close(); authed.Close(); oauth.Close(); conn.Close() })
	handlers := []http.Handler{open.Handler(), authed.Handler(), oauth.Handler()}
	methods := []string{http.MethodPost, http.MethodGet, http.MethodDelete, http.MethodPut}

	f.Add(uint8(0), initBody, "", "", "", "application/json", "")
	f.Add(uint8(8), initBody, "", "", "", "application/json", "Bearer tok")
	f.Add(uint8(8), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`, "sess", "2025-11-25", "", "application/json", "Bearer tok")
	f.Add(uint8(0), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, "", "2026-07-28", "tools/call", "application/json", "")
	f.Add(uint8(8), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, "sess", "2025-11-25", "", "application/json", "Bearer tok")
	f.Add(uint8(1), "", "sess", "", "", "", "")
	f.Add(uint8(2), "", "sess", "", "", "", "Bearer nope")
	f.Add(uint8(16), initBody, "", "", "", "application/json", "Bearer tok")
	f.Add(uint8(16), initBody, "", "", "", "application/json", "")
	f.Add(uint8(16), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`, "sess", "2025-11-25", "", "application/json", "Bearer tok")
	f.Fuzz(func(t *testing.T, which uint8, body, session, version, method, ctype, authz string) {
		r := httptest.NewRequest(methods[int(which)%len(methods)], "/mcp", strings.NewReader(body))
		for k, v := range map[string]string{mcpspec.HeaderSessionID: session, mcpspec.HeaderProtocolVersion: version, mcpspec.HeaderMethod: method, "Content-Type": ctype, "Authorization": authz} {
			if v != "" && !strings.ContainsAny(v, "\r\n\x00") {
				r.Header.Set(k, v)
			}
		}
		r.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		handlers[int(which/8)%len(handlers)].ServeHTTP(w, r)
		if w.Code < 200 || w.Code > 599 {
			t.Fatalf("status %d", w.Code)
		}
		if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") && w.Body.Len() > 0 && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("invalid JSON answer: %q", w.Body.String())
		}
		if h := w.Header().Get("WWW-Authenticate"); h != "" {
			if cs, err := oauthex.ParseWWWAuthenticate([]string{h}); err != nil || len(cs) != 1 || cs[0].Scheme != "bearer" {
				t.Fatalf("a challenge clients cannot parse: %q (%v)", h, err)
			}
		}
	})
}

const initBody = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
