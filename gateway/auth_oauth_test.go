package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"google.golang.org/grpc"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// whoami answers with what its handler sees of the caller.
func whoami(_ context.Context, c *worker.Call) (*worker.Result, error) {
	b, _ := json.Marshal(map[string]any{"principal": c.Principal(), "scopes": c.Scopes(), "arguments": c.Arguments})
	return worker.Text(string(b)), nil
}

// coordinatorWithTools starts etcd, a coordinator and a worker with the
// demo tools and whoami, and returns a connection to the coordinator.
func coordinatorWithTools(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	conn := coord.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "w1"}, func(w *worker.Worker) {
		demo.Register(w)
		w.Handle(worker.Tool{Name: "whoami", Description: "Says who called."}, whoami)
	})
	waitFor(t, "the tools", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) >= 4
	})
	return conn
}

// oauthGateway is a gateway in front of the provider: keys found through
// the issuer's metadata, a policy needing "mcp" for everything and
// "tools:whoami" for whoami.
func oauthGateway(t *testing.T, coord grpc.ClientConnInterface, p *provider, resource *string) string {
	policy := &authz.ToolPolicy{Required: []string{"mcp"}, Tools: map[string][]string{"whoami": {"tools:whoami"}}}
	return startAuthedGateway(t, coord, func(url string) gateway.Options {
		*resource = url
		p.set(url, 5*time.Minute)
		jwks, err := auth.NewRemoteJWKS(t.Context(), auth.JWTOptions{Issuer: p.issuer, Audience: url, RefreshFloor: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { jwks.Close() })
		return gateway.Options{Authenticator: jwks, Auth: &gateway.AuthOptions{
			Resource: url, AuthorizationServers: []string{p.issuer}, Policy: policy,
		}}
	})
}

// challengeParams parses a Bearer challenge with the go-sdk's parser (the
// one its clients use), and returns its parameters.
func challengeParams(t *testing.T, h string) map[string]string {
	t.Helper()
	cs, err := oauthex.ParseWWWAuthenticate([]string{h})
	if err != nil || len(cs) != 1 || cs[0].Scheme != "bearer" {
		t.Fatalf("not one Bearer challenge: %q (%v)", h, err)
	}
	return cs[0].Params
}

// Against a real OpenID provider in the test (zitadel/oidc): the gateway
// finds the provider's keys through its metadata; a client-credentials
// token is accepted and its tool handler sees the principal and scopes
// (and nothing of the token); a token for another audience, an expired
// one and one signed by a key the provider never published are 401 with
// the challenge naming the metadata; a missing scope is 403
// insufficient_scope naming every scope the call needs; and a key
// rotated at the provider is picked up without a restart, while tokens
// of the key it dropped stop working.
func TestOAuthProvider(t *testing.T) {
	coord := coordinatorWithTools(t)
	p := startProvider(t, "")
	var resource string
	url := oauthGateway(t, coord, p, &resource)
	metadata := strings.Replace(resource, "/mcp", "/.well-known/oauth-protected-resource/mcp", 1)

	resp, _ := authedPost(t, url, "", "", initBody)
	if c := challengeParams(t, resp.Header.Get("WWW-Authenticate")); resp.StatusCode != http.StatusUnauthorized ||
		c["resource_metadata"] != metadata || c["scope"] != "mcp" || c["error"] != "" {
		t.Fatalf("no token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	good := p.token(t, "mcp", "tools:whoami")
	resp, _ = authedPost(t, url, good, "", initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize with the provider's token: %d", resp.StatusCode)
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`
	resp, body := authedPost(t, url, good, sid, call)
	var seen struct {
		Principal string
		Scopes    []string
	}
	json.Unmarshal([]byte(resultText(t, body)), &seen)
	if resp.StatusCode != http.StatusOK || seen.Principal != "jwt:"+p.issuer+":robot" || strings.Join(seen.Scopes, " ") != "mcp tools:whoami" {
		t.Fatalf("whoami: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), good) {
		t.Fatal("the handler saw the token")
	}

	narrow := p.token(t, "mcp")
	resp, _ = authedPost(t, url, narrow, "", initBody)
	nsid := resp.Header.Get("Mcp-Session-Id")
	resp, body = authedPost(t, url, narrow, nsid, call)
	if c := challengeParams(t, resp.Header.Get("WWW-Authenticate")); resp.StatusCode != http.StatusForbidden ||
		c["error"] != "insufficient_scope" || c["scope"] != "mcp tools:whoami" || c["resource_metadata"] != metadata {
		t.Fatalf("a token without tools:whoami: %d %q %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	echo := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
	if resp, body := authedPost(t, url, narrow, nsid, echo); resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hi"`) {
		t.Fatalf("echo needs only mcp: %d %s", resp.StatusCode, body)
	}

	p.set("https://other.example/mcp", 5*time.Minute)
	otherAudience := p.token(t, "mcp")
	p.set(resource, 5*time.Minute)
	expired := p.expiredToken(t)
	stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": p.issuer, "aud": resource, "sub": "robot", "scope": "mcp", "exp": time.Now().Add(time.Hour).Unix(),
	})
	forged.Header["kid"] = "stranger"
	unknownKey, _ := forged.SignedString(stranger)
	for name, token := range map[string]string{"other audience": otherAudience, "expired": expired, "unknown key": unknownKey} {
		resp, _ := authedPost(t, url, token, "", initBody)
		if c := challengeParams(t, resp.Header.Get("WWW-Authenticate")); resp.StatusCode != http.StatusUnauthorized ||
			c["error"] != "invalid_token" || c["resource_metadata"] != metadata {
			t.Errorf("%s: %d %q", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	before := p.token(t, "mcp")
	p.rotate(t)
	after := p.token(t, "mcp")
	if resp, _ := authedPost(t, url, after, "", initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("a token of the rotated-in key: %d", resp.StatusCode)
	}
	if resp, _ := authedPost(t, url, before, "", initBody); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token of the key the provider dropped: %d", resp.StatusCode)
	}
}

// resultText returns the first text block of a tools/call result.
func resultText(t *testing.T, body []byte) string {
	t.Helper()
	if _, data, ok := strings.Cut(string(body), "data: "); ok { // an SSE stream
		body = []byte(strings.SplitN(data, "\n", 2)[0])
	}
	var r struct {
		Result struct {
			Content []struct{ Text string }
		}
	}
	if err := json.Unmarshal(body, &r); err != nil || len(r.Result.Content) == 0 {
		t.Fatalf("not a tools/call result: %s", body)
	}
	return r.Result.Content[0].Text
}
