package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
)

// oauthFlags make the gateway an OAuth 2.1 resource server (the MCP
// authorization spec) and bound each principal's rates.
type oauthFlags struct {
	publicURL, jwksURL, authServers, jwtTypes, policyFile string
	refresh                                               time.Duration
	sessionRate, requestRate                              float64
	sessionBurst, requestBurst                            int

	policy *authz.ToolPolicy
	remote *auth.JWKS // to close
}

func (a *oauthFlags) register(f *cmdline.Flags) {
	f.StringVar(&a.publicURL, "public-url", "", "the gateway's canonical MCP `URL` as clients reach it (behind an ingress, the public one), e.g. https://mcp.example.com/mcp: serves OAuth protected-resource metadata and is the JWT audience")
	f.StringVar(&a.jwksURL, "jwks-url", "", "`URL` of the JWKS that signs JWTs, refreshed in the background and on an unknown kid (default: found in --jwt-issuer's metadata)")
	f.DurationVar(&a.refresh, "jwks-refresh", 15*time.Minute, "how often JWKS keys are fetched again")
	f.StringVar(&a.authServers, "authorization-servers", "", "comma-separated issuer `URLs` named in the metadata (default: --jwt-issuer)")
	f.StringVar(&a.jwtTypes, "jwt-types", "", "comma-separated JWT \"typ\" `values` accepted, e.g. at+jwt (RFC 9068); empty accepts any")
	f.StringVar(&a.policyFile, "auth-policy", "", "JSON `file` of the scopes each method, tool and resource needs, and per-principal tool allow/deny lists")
	f.Float64Var(&a.sessionRate, "session-rate", 0, "new sessions a second per principal (each is an etcd write); 0 means no limit")
	f.IntVar(&a.sessionBurst, "session-burst", 0, "burst of new sessions per principal (default: the rate rounded up)")
	f.Float64Var(&a.requestRate, "request-rate", 0, "requests a second per principal; 0 means no limit")
	f.IntVar(&a.requestBurst, "request-burst", 0, "burst of requests per principal (default: the rate rounded up)")
}

func (a *oauthFlags) check(o *gatewayFlags) error {
	if a.publicURL != "" {
		u, err := url.Parse(a.publicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return cmdline.Usage(fmt.Errorf("--public-url %q is not an http(s) URL", a.publicURL))
		}
	}
	switch {
	case a.sessionRate < 0 || a.requestRate < 0 || a.sessionBurst < 0 || a.requestBurst < 0:
		return cmdline.Usage(errors.New("--session-rate, --request-rate and their bursts must not be negative"))
	case a.jwksURL != "" && o.jwksFile != "":
		return cmdline.Usage(errors.New("pass one of --jwks-file and --jwks-url, not both"))
	case (a.jwksURL != "" || o.jwksFile != "") && o.jwtIssuer == "":
		return cmdline.Usage(errors.New("--jwks-file and --jwks-url need --jwt-issuer"))
	case o.jwtIssuer != "" && o.jwtAudience == "" && a.publicURL == "":
		return cmdline.Usage(errors.New("JWT authentication needs --jwt-audience or --public-url"))
	}
	if a.policyFile != "" {
		p, err := authz.LoadToolPolicy(a.policyFile)
		if err != nil {
			return cmdline.Usage(fmt.Errorf("--auth-policy: %w", err))
		}
		a.policy = p
	}
	return nil
}

// jwks builds the JWT authenticator: keys from the file, the URL, or
// the issuer's metadata.
func (a *oauthFlags) jwks(o *gatewayFlags, log *slog.Logger) (*auth.JWKS, error) {
	opts := auth.JWTOptions{
		Issuer: o.jwtIssuer, Audience: o.jwtAudience, Types: list(a.jwtTypes),
		JWKSURL: a.jwksURL, RefreshInterval: a.refresh, Logger: log,
	}
	if opts.Audience == "" {
		opts.Audience = a.publicURL
	}
	if o.jwksFile != "" {
		j, err := auth.NewJWKS(o.jwksFile, opts)
		if err != nil {
			return nil, cmdline.Usage(err)
		}
		return j, nil
	}
	j, err := auth.NewRemoteJWKS(context.Background(), opts)
	if err != nil {
		return nil, err
	}
	a.remote = j
	return j, nil
}

// options are the gateway's AuthOptions, nil when none is configured.
func (a *oauthFlags) options(o *gatewayFlags) *gateway.AuthOptions {
	if a.publicURL == "" && a.policy == nil && a.sessionRate == 0 && a.requestRate == 0 {
		return nil
	}
	servers := list(a.authServers)
	if servers == nil && o.jwtIssuer != "" {
		servers = []string{o.jwtIssuer}
	}
	return &gateway.AuthOptions{
		Resource: a.publicURL, AuthorizationServers: servers, Policy: a.policy,
		Sessions: auth.RateLimit{Rate: a.sessionRate, Burst: a.sessionBurst},
		Requests: auth.RateLimit{Rate: a.requestRate, Burst: a.requestBurst},
	}
}

// close stops refreshing remote keys.
func (a *oauthFlags) close() {
	if a.remote != nil {
		a.remote.Close()
	}
}

func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
