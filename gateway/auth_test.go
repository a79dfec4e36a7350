package gateway_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

func authedPost(t *testing.T, url, token, session, body string) (*http.Response, []byte) {
	t.Helper()
	return testcluster.PostMCP(t, url, token, session, body)
}

const initBody = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// Bearer tokens: missing or unknown tokens get 401 with WWW-Authenticate
// and touch nothing; a session is bound to its principal, so another
// principal presenting its id is turned away; the principal is audited;
// the tokens file is reread when it changes.
func TestBearerTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# token principal\ns3cret-a alice\ns3cret-b bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	st := newStack(t, stackOptions{gw: gateway.Options{Authenticator: tokens}})
	url := st.urls[0]
	before := st.revision(t)
	for _, token := range []string{"", "wrong"} {
		resp, _ := authedPost(t, url, token, "", initBody)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
			t.Fatalf("token %q: %d %q", token, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if keys := st.callWrites(t, before, st.revision(t)); len(keys) > 0 {
		t.Fatalf("an unauthenticated request reached etcd: %v", keys)
	}
	resp, _ := authedPost(t, url, "s3cret-a", "", initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("alice's initialize: %d", resp.StatusCode)
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	if resp, _ := authedPost(t, url, "s3cret-b", sid, call); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob with alice's session: %d, want 404", resp.StatusCode)
	}
	if resp, body := authedPost(t, url, "s3cret-a", sid, call); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hi"`) {
		t.Fatalf("alice's call: %d %s", resp.StatusCode, body)
	}
	if as := st.audits(t, "session:"+sid)["1"]; len(as) != 1 || as[0].Principal != "alice" {
		t.Fatalf("audit = %+v", as)
	}
	// Rotate: carol replaces alice, without a restart.
	if err := os.WriteFile(file, []byte("s3cret-c carol\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(file, later, later)
	if resp, _ := authedPost(t, url, "s3cret-a", "", initBody); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a removed token still works: %d", resp.StatusCode)
	}
	if resp, _ := authedPost(t, url, "s3cret-c", "", initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("a new token does not work: %d", resp.StatusCode)
	}
}
