package gateway_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/authz"
)

func tokensAuth(t *testing.T, lines string) auth.Authenticator {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(file, []byte(lines), 0o600)
	a, err := auth.NewTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The metadata document is served at the root well-known path and at the
// one the resource's path is appended to, with the go-sdk's types; a
// gateway without a resource serves none, and its challenge is as it
// always was.
func TestProtectedResourceMetadata(t *testing.T) {
	coord := coordinatorWithTools(t)
	var resource string
	url := startAuthedGateway(t, coord, func(url string) gateway.Options {
		resource = url
		return gateway.Options{Authenticator: tokensAuth(t, "tok alice\n"), Auth: &gateway.AuthOptions{
			Resource: url, AuthorizationServers: []string{"https://idp.example"},
			Policy: &authz.ToolPolicy{Required: []string{"mcp"}, Tools: map[string][]string{"echo": {"tools:echo"}}},
		}}
	})
	base := strings.TrimSuffix(url, "/mcp")
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Resource               string   `json:"resource"`
			AuthorizationServers   []string `json:"authorization_servers"`
			ScopesSupported        []string `json:"scopes_supported"`
			BearerMethodsSupported []string `json:"bearer_methods_supported"`
		}
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || m.Resource != resource || !slices.Equal(m.AuthorizationServers, []string{"https://idp.example"}) ||
			!slices.Equal(m.ScopesSupported, []string{"mcp", "tools:echo"}) || !slices.Equal(m.BearerMethodsSupported, []string{"header"}) {
			t.Fatalf("%s: %d %+v", path, resp.StatusCode, m)
		}
	}

	plain := startAuthedGateway(t, coord, func(string) gateway.Options {
		return gateway.Options{Authenticator: tokensAuth(t, "tok alice\n")}
	})
	resp, err := http.Get(strings.TrimSuffix(plain, "/mcp") + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("metadata without a resource: %d", resp.StatusCode)
	}
	if resp, _ := authedPost(t, plain, "", "", initBody); resp.Header.Get("WWW-Authenticate") != `Bearer realm="mcpcancel"` {
		t.Fatalf("challenge without a resource: %q", resp.Header.Get("WWW-Authenticate"))
	}
}

// Per-principal tool lists: alice may call only echo, everyone else
// anything but echo. A refused call is 403 with a JSON-RPC error naming
// the tool, and is never begun (no etcd write).
func TestToolAllowDenyLists(t *testing.T) {
	st := newStack(t, stackOptions{gw: gateway.Options{
		Authenticator: tokensAuth(t, "tok-a alice\ntok-b bob\n"),
		Auth: &gateway.AuthOptions{Policy: &authz.ToolPolicy{Principals: map[string]authz.Access{
			"alice": {Allow: []string{"echo"}},
			"*":     {Deny: []string{"echo"}},
		}}},
	}})
	url := st.urls[0]
	session := func(token string) string {
		resp, _ := authedPost(t, url, token, "", initBody)
		return resp.Header.Get("Mcp-Session-Id")
	}
	sa, sb := session("tok-a"), session("tok-b")
	echo := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	spin := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"spin","arguments":{"millis":1}}}`
	if resp, body := authedPost(t, url, "tok-a", sa, echo); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hi"`) {
		t.Fatalf("alice's echo: %d %s", resp.StatusCode, body)
	}
	before := st.revision(t)
	for _, c := range []struct{ who, token, sid, body string }{{"alice's spin", "tok-a", sa, spin}, {"bob's echo", "tok-b", sb, echo}} {
		resp, body := authedPost(t, url, c.token, c.sid, c.body)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "is not allowed for this principal") || resp.Header.Get("WWW-Authenticate") != "" {
			t.Errorf("%s: %d %q %s", c.who, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	if keys := st.callWrites(t, before, st.revision(t)); len(keys) > 0 {
		t.Fatalf("refused calls wrote to etcd: %v", keys)
	}
	if resp, body := authedPost(t, url, "tok-b", sb, spin); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's spin: %d %s", resp.StatusCode, body)
	}
}
