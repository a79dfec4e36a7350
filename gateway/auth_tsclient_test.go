package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// The official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// test/clients) with its ClientCredentialsProvider, unattended, against
// the gateway in front of the in-process OpenID provider: from the first
// 401 alone it finds the protected resource metadata, discovers the
// provider, gets a client-credentials token and calls whoami, whose
// handler sees the SDK's principal and scopes. A client configured
// without whoami's scope is answered 403 insufficient_scope, which the
// SDK reads as such (it tries once more, then gives up: a
// client-credentials client of SDK 1.32 asks only for its configured
// scope, which the spec allows).
func TestOAuthTypeScriptClientCredentials(t *testing.T) {
	coord := coordinatorWithTools(t)
	p := startProvider(t, "")
	var resource string
	url := oauthGateway(t, coord, p, &resource)

	steps, result, failure := runOAuthClient(t, url, p, "mcp tools:whoami", "whoami")
	want := []string{
		"POST /mcp 401", // no token: the challenge names the metadata
		"GET /.well-known/oauth-protected-resource/mcp 200",
		"GET /.well-known/openid-configuration 200",
		"POST /oauth/token 200",
		"POST /mcp 200", // initialize, with the token
	}
	if failure != "" || !containsInOrder(steps, want) {
		t.Fatalf("the SDK did not walk the discovery (%s): want %q in order", failure, want)
	}
	text := ""
	if r, ok := result["result"].(map[string]any); ok {
		if c, ok := r["content"].([]any); ok && len(c) > 0 {
			text, _ = c[0].(map[string]any)["text"].(string)
		}
	}
	var seen struct {
		Principal string
		Scopes    []string
	}
	json.Unmarshal([]byte(text), &seen)
	if seen.Principal != "jwt:"+p.issuer+":robot" || strings.Join(seen.Scopes, " ") != "mcp tools:whoami" {
		t.Fatalf("whoami through the SDK: %v", result)
	}

	steps, _, failure = runOAuthClient(t, url, p, "mcp", "whoami")
	if !containsInOrder(steps, []string{"POST /mcp 200", "POST /mcp 403"}) || !strings.Contains(failure, "403") {
		t.Fatalf("a client without whoami's scope: %q, %s", steps, failure)
	}
}

// runOAuthClient runs the SDK client script and returns the HTTP
// requests it made ("METHOD PATH STATUS"), its result event, and its
// error message if it failed.
func runOAuthClient(t *testing.T, url string, p *provider, scope, tool string) (steps []string, result map[string]any, failure string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := nodetest.Node(t, ctx, "oauth-client-credentials.mjs", url, p.issuer, p.clientID, p.secret, scope, tool)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output()
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e["event"] {
		case "http":
			u, _ := e["url"].(string)
			rest := strings.TrimPrefix(u, "http://")
			steps = append(steps, e["method"].(string)+" "+rest[strings.Index(rest, "/"):]+" "+jsonNumber(e["status"]))
		case "result":
			result = e
		case "error":
			failure, _ = e["message"].(string)
		}
	}
	t.Logf("the SDK's requests (scope %q):\n%s", scope, strings.Join(steps, "\n"))
	if result == nil && failure == "" {
		t.Fatalf("the client printed no outcome\nstdout:\n%s\nstderr:\n%s", out, stderr.String())
	}
	return steps, result, failure
}

func jsonNumber(v any) string { b, _ := json.Marshal(v); return string(b) }

// containsInOrder says whether want appear in got in order (not
// necessarily adjacent); each element of want must be a prefix of one
// of got.
func containsInOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && strings.HasPrefix(g, want[i]) {
			i++
		}
	}
	return i == len(want)
}
