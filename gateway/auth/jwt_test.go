package auth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/jwttest"
)

type signer = jwttest.Signer

var (
	b64    = jwttest.B64
	claims = jwttest.Claims
)

func authenticate(a auth.Authenticator, token string) (string, error) {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return a.Authenticate(r)
}

// Every algorithm, each with its kid; every way a token can be wrong.
func TestJWTVerification(t *testing.T) {
	hs, rs, es := jwttest.HS256(t, "h1"), jwttest.RS256(t, "r1"), jwttest.ES256(t, "e1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	jwttest.WriteJWKS(t, file, hs, rs, es)
	v, err := auth.NewJWKS(file, auth.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*signer{hs, rs, es} {
		p, err := authenticate(v, s.Token(nil, claims("alice", time.Minute, nil)))
		if err != nil || p != "jwt:https://issuer.test:alice" {
			t.Fatalf("%s: principal %q, %v", s.Alg, p, err)
		}
	}
	if p, err := authenticate(v, es.Token(nil, claims("bob", time.Minute, map[string]any{"aud": []string{"other", "mcpcancel"}}))); err != nil || p != "jwt:https://issuer.test:bob" {
		t.Fatalf("audience list: %q, %v", p, err)
	}
	// Within the leeway, an expired token still passes; past it, not.
	if _, err := authenticate(v, hs.Token(nil, claims("alice", -10*time.Second, nil))); err != nil {
		t.Fatalf("expired 10s ago, inside the leeway: %v", err)
	}
	// The RSA public key, used as an HMAC secret, must not verify.
	n, _ := base64.RawURLEncoding.DecodeString(rs.JWK["n"].(string))
	confused := &signer{Alg: "HS256", KID: "r1", Sign: func(b []byte) []byte {
		m := hmac.New(sha256.New, n)
		m.Write(b)
		return m.Sum(nil)
	}}
	bad := map[string]string{
		"missing":            "",
		"garbage":            "not-a-jwt",
		"expired":            rs.Token(nil, claims("alice", -time.Hour, nil)),
		"no exp":             rs.Token(nil, claims("alice", time.Hour, map[string]any{"exp": nil})),
		"not yet valid":      rs.Token(nil, claims("alice", time.Hour, map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})),
		"other issuer":       es.Token(nil, claims("alice", time.Hour, map[string]any{"iss": "https://evil.test"})),
		"other audience":     es.Token(nil, claims("alice", time.Hour, map[string]any{"aud": "someone-else"})),
		"no subject":         es.Token(nil, claims("", time.Hour, nil)),
		"control in subject": es.Token(nil, claims("al\nice", time.Hour, nil)),
		"alg none":           unsigned(hs.Token(map[string]any{"alg": "none"}, claims("alice", time.Hour, nil))),
		"critical extension": hs.Token(map[string]any{"crit": []string{"exp"}}, claims("alice", time.Hour, nil)),
		"kid of another key": hs.Token(map[string]any{"kid": "e1"}, claims("alice", time.Hour, nil)),
		"alg confusion":      confused.Token(nil, claims("alice", time.Hour, nil)),
		"unknown key":        jwttest.HS256(t, "h1").Token(nil, claims("alice", time.Hour, nil)),
		"tampered claims":    tamper(es.Token(nil, claims("alice", time.Hour, nil))),
	}
	for name, token := range bad {
		if p, err := authenticate(v, token); err == nil {
			t.Errorf("%s: accepted as %q", name, p)
		}
	}
}

// unsigned drops token's signature.
func unsigned(token string) string {
	return token[:strings.LastIndex(token, ".")+1]
}

// tamper swaps the claims of token for mallory's, keeping the signature.
func tamper(token string) string {
	parts := strings.Split(token, ".")
	cb, _ := json.Marshal(claims("mallory", time.Hour, nil))
	return parts[0] + "." + b64(cb) + "." + parts[2]
}

// JWKS files that must not load.
func TestJWKSFileRejected(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not json":    "{",
		"no keys":     `{"keys":[]}`,
		"short hmac":  `{"keys":[{"kty":"oct","k":"c2hvcnQ"}]}`,
		"bad curve":   `{"keys":[{"kty":"EC","crv":"P-384","x":"AA","y":"AA"}]}`,
		"off curve":   `{"keys":[{"kty":"EC","crv":"P-256","x":"` + b64(make([]byte, 32)) + `","y":"` + b64(make([]byte, 32)) + `"}]}`,
		"only enc":    `{"keys":[{"kty":"oct","use":"enc","k":"` + b64(make([]byte, 32)) + `"}]}`,
		"small RSA n": `{"keys":[{"kty":"RSA","n":"` + b64(make([]byte, 64)) + `","e":"AQAB"}]}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		os.WriteFile(path, []byte(body), 0o600)
		if _, err := auth.NewJWKS(path, auth.JWTOptions{Issuer: "i", Audience: "a"}); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	path := filepath.Join(dir, "ok")
	jwttest.WriteJWKS(t, path, jwttest.HS256(t, "k"))
	if _, err := auth.NewJWKS(path, auth.JWTOptions{Issuer: "i"}); err == nil {
		t.Error("no audience: accepted")
	}
}

// PS256, ES384 and EdDSA verify; a key's own "alg" binds it (a PS256
// key does not verify RS256 tokens); with Types set, only those "typ"
// headers pass (RFC 9068); scopes come from "scope" and "scp".
func TestJWTAlgorithmsAndTypes(t *testing.T) {
	ps, psKey := jwttest.Lib(t, "PS256", "p1")
	es, _ := jwttest.Lib(t, "ES384", "e1")
	ed, _ := jwttest.Lib(t, "EdDSA", "d1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	jwttest.WriteJWKS(t, file, ps, es, ed)
	v, err := auth.NewJWKS(file, auth.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*signer{ps, es, ed} {
		if p, err := authenticate(v, s.Token(nil, claims("alice", time.Minute, nil))); err != nil || p != "jwt:https://issuer.test:alice" {
			t.Fatalf("%s: %q, %v", s.Alg, p, err)
		}
	}
	rs := &signer{Alg: "RS256", KID: "p1", Sign: func(b []byte) []byte {
		sig, _ := jwt.SigningMethodRS256.Sign(string(b), psKey)
		return sig
	}}
	if _, err := authenticate(v, rs.Token(nil, claims("alice", time.Minute, nil))); err == nil {
		t.Fatal("an RS256 token verified with a key whose alg is PS256")
	}

	typed, err := auth.NewJWKS(file, auth.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel", Types: []string{"at+jwt", "application/at+jwt"}})
	if err != nil {
		t.Fatal(err)
	}
	for typ, ok := range map[string]bool{"at+jwt": true, "AT+JWT": true, "application/at+jwt": true, "JWT": false, "": false} {
		if _, err := authenticate(typed, es.Token(map[string]any{"typ": typ}, claims("alice", time.Minute, nil))); (err == nil) != ok {
			t.Errorf("typ %q: %v, want accepted %v", typ, err, ok)
		}
	}

	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+ed.Token(nil, claims("alice", time.Minute, map[string]any{
		"scope": "mcp tools:echo", "scp": []string{"tools:echo", "files:read", "bad scope", `q"uote`},
	})))
	id, err := v.Identify(r)
	if err != nil || !slices.Equal(id.Scopes, []string{"mcp", "tools:echo", "files:read"}) {
		t.Fatalf("scopes: %+v, %v", id, err)
	}
}
