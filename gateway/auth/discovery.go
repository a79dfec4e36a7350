package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// maxMetadataBytes bounds an authorization server's metadata document.
const maxMetadataBytes = 1 << 20

// metadataURLs are where an issuer's metadata may be, in the order the
// MCP authorization spec has clients try them: RFC 8414 with path
// insertion, OpenID Connect Discovery with path insertion, and OpenID
// Connect Discovery appended to the issuer.
func metadataURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("issuer %q is not an http(s) URL", issuer)
	}
	path := strings.TrimSuffix(u.Path, "/")
	at := func(p string) string { v := *u; v.Path, v.RawQuery, v.Fragment = p, "", ""; return v.String() }
	if path == "" {
		return []string{at("/.well-known/oauth-authorization-server"), at("/.well-known/openid-configuration")}, nil
	}
	return []string{
		at("/.well-known/oauth-authorization-server" + path),
		at("/.well-known/openid-configuration" + path),
		at(path + "/.well-known/openid-configuration"),
	}, nil
}

// discoverJWKS finds the issuer's JWKS URL in its metadata (RFC 8414 or
// OpenID Connect Discovery). The metadata must name the issuer exactly
// (RFC 8414 section 3.3), and its jwks_uri must be https, or http on
// loopback.
func discoverJWKS(ctx context.Context, c *http.Client, issuer string) (string, error) {
	urls, err := metadataURLs(issuer)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, u := range urls {
		jwks, err := jwksFrom(ctx, c, u, issuer)
		if err == nil {
			return jwks, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("auth: no metadata of issuer %s names a JWKS: %w", issuer, errors.Join(errs...))
}

func jwksFrom(ctx context.Context, c *http.Client, metadataURL, issuer string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	b, err := getLimited(ctx, c, metadataURL, maxMetadataBytes)
	if err != nil {
		return "", err
	}
	var meta oauthex.AuthServerMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return "", fmt.Errorf("%s: %w", metadataURL, err)
	}
	switch {
	case meta.Issuer != issuer:
		return "", fmt.Errorf("%s names issuer %q, not %q", metadataURL, meta.Issuer, issuer)
	case !httpsOrLoopback(meta.JWKSURI):
		return "", fmt.Errorf("%s: jwks_uri %q is not https (or http on loopback)", metadataURL, meta.JWKSURI)
	}
	return meta.JWKSURI, nil
}

// httpsOrLoopback says whether raw is an https URL, or an http one on a
// loopback host (tests, a laptop).
func httpsOrLoopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	if u.Scheme == "https" {
		return true
	}
	if u.Scheme != "http" {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}
