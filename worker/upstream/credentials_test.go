package upstream_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// frontedServer is a Go SDK MCP server over Streamable HTTP with one
// tool, recording the Authorization header of every request it gets.
type frontedServer struct {
	mu   sync.Mutex
	seen []string
}

func startFronted(t *testing.T) (*frontedServer, string) {
	t.Helper()
	f := &frontedServer{}
	s := mcp.NewServer(&mcp.Implementation{Name: "fronted", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "peek"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "peeked"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, r.Header.Get("Authorization"))
		f.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return f, srv.URL + "/mcp"
}

func (f *frontedServer) authorizations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Compact(slices.Clone(f.seen))
}

// authedStack is startStack behind a gateway that requires the bearer
// token clientToken.
func authedStack(t *testing.T, opts upstream.Options, clientToken string) *stack {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte(clientToken+" alice\n"), 0o600)
	tf, err := auth.NewTokenFile(tokens)
	if err != nil {
		t.Fatal(err)
	}
	e := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, e.Client(), coordinator.Options{})
	st := &stack{etcd: e.Client(), coord: c.Client(t), coordAddr: c.Addr}
	st.gw, st.url = testcluster.StartGateway(t, c.Conn(t), gateway.Options{Authenticator: tf})
	st.adapter, st.stopAdapter = st.startAdapter(t, "adapter", opts)
	return st
}

// callPeek calls the fronted tool through the gateway as the client.
func callPeek(t *testing.T, st *stack, clientToken string) {
	t.Helper()
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	resp, _ := testcluster.PostMCP(t, st.url, clientToken, "", init)
	sid := resp.Header.Get("Mcp-Session-Id")
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"peek","arguments":{}}}`
	if resp, body := testcluster.PostMCP(t, st.url, clientToken, sid, call); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "peeked") {
		t.Fatalf("peek through the gateway: %d %s", resp.StatusCode, body)
	}
}

// A fronted HTTP server never sees the client's token: the adapter sends
// its own credentials, a header from a secret file (read again when the
// secret rotates) or an OAuth client-credentials token.
func TestUpstreamOwnCredentials(t *testing.T) {
	const clientToken = "the-clients-own-token"
	t.Run("header file", func(t *testing.T) {
		fronted, target := startFronted(t)
		secret := filepath.Join(t.TempDir(), "header")
		os.WriteFile(secret, []byte("Authorization: Bearer upstream-1\n"), 0o600)
		hc, err := upstream.Credentials{HeaderFile: secret}.HTTPClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		st := authedStack(t, upstream.Options{URL: target, HTTPClient: hc}, clientToken)
		callPeek(t, st, clientToken)
		if got := fronted.authorizations(); !slices.Equal(got, []string{"Bearer upstream-1"}) {
			t.Fatalf("the fronted server saw %q", got)
		}
		os.WriteFile(secret, []byte("upstream-2"), 0o600) // a bare token
		later := time.Now().Add(time.Minute)
		os.Chtimes(secret, later, later)
		callPeek(t, st, clientToken)
		if got := fronted.authorizations(); got[len(got)-1] != "Bearer upstream-2" || slices.Contains(got, "Bearer "+clientToken) {
			t.Fatalf("after rotating the secret, the fronted server saw %q", got)
		}
	})
	t.Run("client credentials", func(t *testing.T) {
		fronted, target := startFronted(t)
		var asked []string
		var mu sync.Mutex
		tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, secret, _ := r.BasicAuth()
			r.ParseForm()
			mu.Lock()
			asked = append(asked, r.Form.Get("grant_type")+" "+r.Form.Get("resource"))
			mu.Unlock()
			if id != "adapter" || secret != "adapter-secret" {
				http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"access_token":"cc-token","token_type":"Bearer","expires_in":3600}`))
		}))
		t.Cleanup(tokenSrv.Close)
		cc := &clientcredentials.Config{ClientID: "adapter", ClientSecret: "adapter-secret", TokenURL: tokenSrv.URL,
			EndpointParams: map[string][]string{"resource": {target}}}
		hc, err := upstream.Credentials{ClientCredentials: cc}.HTTPClient(nil)
		if err != nil {
			t.Fatal(err)
		}
		st := authedStack(t, upstream.Options{URL: target, HTTPClient: hc}, clientToken)
		callPeek(t, st, clientToken)
		if got := fronted.authorizations(); !slices.Equal(got, []string{"Bearer cc-token"}) {
			t.Fatalf("the fronted server saw %q", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(asked) != 1 || asked[0] != "client_credentials "+target {
			t.Fatalf("token requests: %q (the token is cached until it expires)", asked)
		}
	})
}
