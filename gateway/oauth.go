package gateway

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// AuthOptions make the gateway an OAuth 2.1 resource server as the MCP
// authorization spec asks, and bound what each principal may do. Every
// field is optional; the zero value changes nothing.
type AuthOptions struct {
	// Resource is the canonical URL of the MCP endpoint as clients reach
	// it (behind an ingress: the public one), such as
	// "https://mcp.example.com/mcp". With it the gateway serves its
	// Protected Resource Metadata (RFC 9728) at
	// /.well-known/oauth-protected-resource and at that path followed by
	// the resource's path, and its 401 and 403 challenges name it.
	// Tokens must name it as their audience (JWTOptions.Audience).
	Resource string
	// AuthorizationServers are the issuers clients get tokens from.
	AuthorizationServers []string
	// ScopesSupported are advertised in the metadata (default: every
	// scope Policy names).
	ScopesSupported []string
	// Policy names the scopes each request needs and which tools each
	// principal may call (nil: any authenticated client may do anything).
	Policy *authz.ToolPolicy
	// Sessions and Requests limit each principal's rate of new sessions
	// (each an etcd write) and of requests; zero values do not limit.
	Sessions, Requests auth.RateLimit
}

// codeRateLimited is the JSON-RPC error code of a request refused by a
// rate limit (in the implementation-defined server error range).
const codeRateLimited = -32029

// setDefaults fills in the default of every zero field.
func (o *AuthOptions) setDefaults() {
	if o.ScopesSupported == nil {
		o.ScopesSupported = o.Policy.Scopes()
	}
}

// guard applies AuthOptions to HTTP requests.
type guard struct {
	opts     AuthOptions
	metadata string // the metadata URL challenges name, or ""
	sessions *auth.Limiter
	requests *auth.Limiter
}

// newGuard applies o, whose defaults are set (Options.setDefaults).
func newGuard(o *AuthOptions) *guard {
	g := &guard{}
	if o == nil {
		return g
	}
	g.opts = *o
	if paths := metadataPaths(g.opts.Resource); len(paths) > 0 {
		u, _ := url.Parse(g.opts.Resource)
		u.Path, u.RawQuery, u.Fragment = paths[len(paths)-1], "", ""
		g.metadata = u.String()
	}
	g.sessions = auth.NewLimiter(g.opts.Sessions)
	g.requests = auth.NewLimiter(g.opts.Requests)
	return g
}

// wellKnown is the RFC 9728 well-known path prefix.
const wellKnown = "/.well-known/oauth-protected-resource"

// metadataPaths are where the metadata of resource is served: the root
// well-known path, and the one with the resource's path appended (the
// spec's clients try that first). None without a resource.
func metadataPaths(resource string) []string {
	u, err := url.Parse(resource)
	if resource == "" || err != nil {
		return nil
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		return []string{wellKnown, wellKnown + p}
	}
	return []string{wellKnown}
}

// registerMetadata serves the Protected Resource Metadata on mux, with
// the go-sdk's handler (GET, and CORS for browser clients).
func (g *Gateway) registerMetadata(mux *http.ServeMux) {
	o := g.opts.Auth
	if o == nil || o.Resource == "" {
		return
	}
	h := sdkauth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: o.Resource, AuthorizationServers: o.AuthorizationServers,
		ScopesSupported: o.ScopesSupported, BearerMethodsSupported: []string{"header"},
		ResourceName: "mcpcancel",
	})
	for _, p := range metadataPaths(o.Resource) {
		mux.Handle(p, h)
	}
}

// challenge is a Bearer WWW-Authenticate value (RFC 6750 section 3), in
// the realm "mcpcancel" as before there was metadata to name. Parameters
// with empty values are left out.
func (g *guard) challenge(errCode, description string, scopes []string) string {
	params := []string{`realm="mcpcancel"`}
	add := func(k, v string) {
		if v != "" {
			params = append(params, fmt.Sprintf("%s=%q", k, v))
		}
	}
	add("resource_metadata", g.metadata)
	add("scope", strings.Join(scopes, " "))
	add("error", errCode)
	add("error_description", description)
	return "Bearer " + strings.Join(params, ", ")
}

// unauthorized answers 401. No error code when no credentials were sent
// (RFC 6750 section 3.1); the scope named is what every request needs,
// else what the gateway supports.
func (g *guard) unauthorized(w http.ResponseWriter, r *http.Request) {
	scopes := g.opts.Policy.Decide(authz.Request{}).Needed
	if len(scopes) == 0 {
		scopes = g.opts.ScopesSupported
	}
	errCode, desc := "", ""
	if r.Header.Get("Authorization") != "" {
		errCode, desc = "invalid_token", "the bearer token is invalid or expired"
	}
	w.Header().Set("WWW-Authenticate", g.challenge(errCode, desc, scopes))
	writeErrorResponse(w, http.StatusUnauthorized, jsonrpc.ID{}, false,
		jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "unauthorized: a valid bearer token is required"))
}

// admit decides whether a client's message may go on: the policy's
// scopes and lists (requests only), and the principal's rates. It
// answers 403 or 429 and reports false when it may not. Notifications
// and responses always go on: a cancellation is never refused.
func (h *httpTransport) admit(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, principal string) bool {
	g := h.guard
	if m.Kind != jsonrpc.KindRequest {
		return true
	}
	req := authz.Request{Principal: principal, Granted: identityFrom(r.Context()).Scopes, Method: m.Method}
	req.Tool, req.Resource = target(m)
	d := g.opts.Policy.Decide(req)
	switch {
	case d.Denied != "":
		writeErrorResponse(w, http.StatusForbidden, m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "forbidden: %s", d.Denied))
		return false
	case len(d.Missing) > 0:
		desc := "this request needs the scopes " + strings.Join(d.Missing, " ")
		w.Header().Set("WWW-Authenticate", g.challenge("insufficient_scope", desc, d.Needed))
		writeErrorResponse(w, http.StatusForbidden, m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "forbidden: %s", desc))
		return false
	}
	if m.Method == "initialize" && !allow(w, g.sessions, principal) {
		writeErrorResponse(w, http.StatusTooManyRequests, m.ID, true, jsonrpc.Errorf(codeRateLimited, "rate limited: too many new sessions for this principal; retry after the Retry-After header's seconds"))
		return false
	}
	if !allow(w, g.requests, principal) {
		writeErrorResponse(w, http.StatusTooManyRequests, m.ID, true, jsonrpc.Errorf(codeRateLimited, "rate limited: too many requests for this principal; retry after the Retry-After header's seconds"))
		return false
	}
	return true
}

// target is the tool a tools/call names, or the URI a resources/read
// (or subscribe) names.
func target(m *jsonrpc.Message) (tool, resource string) {
	p := paramsOf(m)
	switch m.Method {
	case "tools/call":
		return p.Name, ""
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		return "", p.URI
	}
	return "", ""
}

// allow spends a token of principal's bucket in l. When none is left it
// sets Retry-After on w (whole seconds, rounded up) and reports false.
func allow(w http.ResponseWriter, l *auth.Limiter, principal string) bool {
	ok, after := l.Allow(principal)
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(after.Seconds()))))
	}
	return ok
}
