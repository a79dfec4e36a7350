package gateway_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/jwttest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// countingConn dials target and counts the calls that leave through it.
func countingConn(t *testing.T, target string, n *atomic.Int64) *grpc.ClientConn {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			n.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			n.Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Through the real gateway: tokens that fail get 401 and no coordinator
// call at all; a good one runs a call whose audit names the JWT
// principal; the JWKS file is reread when keys rotate; and a tokens file
// works beside it.
func TestJWTGateway(t *testing.T) {
	old, fresh := jwttest.ES256(t, "2025"), jwttest.RS256(t, "2026")
	file := filepath.Join(t.TempDir(), "jwks.json")
	jwttest.WriteJWKS(t, file, old)
	jwks, err := auth.NewJWKS(file, auth.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel"})
	if err != nil {
		t.Fatal(err)
	}
	tokensPath := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokensPath, []byte("static-token ops\n"), 0o600)
	tokens, err := auth.NewTokenFile(tokensPath)
	if err != nil {
		t.Fatal(err)
	}
	st := newStack(t, stackOptions{})
	var calls atomic.Int64
	_, url := testcluster.StartGateway(t, countingConn(t, st.coord.Addr, &calls), gateway.Options{Authenticator: auth.AnyOf(tokens, jwks)})
	// Run opens two streams, WatchTools and WatchSessionNotifications, and
	// calls nothing else on its own.
	waitFor(t, "the gateway to watch the tools and the notes", func() bool { return calls.Load() >= 2 })
	before, rev := calls.Load(), st.revision(t)
	for name, token := range map[string]string{
		"missing": "",
		"invalid": "eyJhbGciOiJub25lIn0.e30.",
		"expired": old.Token(nil, jwttest.Claims("alice", -time.Hour, nil)),
		"wrong":   "static-token-2",
	} {
		resp, _ := authedPost(t, url, token, "", initBody)
		challenge := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer ") || (token != "") != strings.Contains(challenge, "invalid_token") {
			t.Fatalf("%s: %d %q", name, resp.StatusCode, challenge)
		}
	}
	if n := calls.Load(); n != before {
		t.Fatalf("unauthenticated requests made %d coordinator calls", n-before)
	}
	if keys := st.callWrites(t, rev, st.revision(t)); len(keys) > 0 {
		t.Fatalf("unauthenticated requests wrote to etcd: %v", keys)
	}
	good := old.Token(nil, jwttest.Claims("alice", time.Hour, nil))
	resp, _ := authedPost(t, url, good, "", initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize with a good token: %d", resp.StatusCode)
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	if resp, body := authedPost(t, url, good, sid, call); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hi"`) {
		t.Fatalf("call: %d %s", resp.StatusCode, body)
	}
	if as := st.audits(t, "session:"+sid)["1"]; len(as) != 1 || as[0].Principal != "jwt:https://issuer.test:alice" {
		t.Fatalf("audit = %+v", as)
	}
	// The ops token's principal cannot use alice's session.
	if resp, _ := authedPost(t, url, "static-token", sid, call); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("ops with alice's session: %d, want 404", resp.StatusCode)
	}
	// Rotate: the old key goes, the new one comes, without a restart.
	jwttest.WriteJWKS(t, file, fresh)
	later := time.Now().Add(time.Minute)
	os.Chtimes(file, later, later)
	if resp, _ := authedPost(t, url, good, "", initBody); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token of a removed key: %d", resp.StatusCode)
	}
	if resp, _ := authedPost(t, url, fresh.Token(nil, jwttest.Claims("alice", time.Hour, nil)), "", initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("a token of the new key: %d", resp.StatusCode)
	}
}
