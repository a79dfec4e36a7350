package gateway_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

var b64 = base64.RawURLEncoding.EncodeToString

// signer makes tokens with one key and knows its JWK.
type signer struct {
	alg, kid string
	jwk      map[string]any
	sign     func(signed []byte) []byte
}

func hsSigner(t *testing.T, kid string) *signer {
	secret := make([]byte, 32)
	rand.Read(secret)
	return &signer{alg: "HS256", kid: kid, jwk: map[string]any{"kty": "oct", "kid": kid, "k": b64(secret)},
		sign: func(b []byte) []byte {
			m := hmac.New(sha256.New, secret)
			m.Write(b)
			return m.Sum(nil)
		}}
}

func rsSigner(t *testing.T, kid string) *signer {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e := big.NewInt(int64(key.E)).Bytes()
	return &signer{alg: "RS256", kid: kid, jwk: map[string]any{"kty": "RSA", "kid": kid, "n": b64(key.N.Bytes()), "e": b64(e), "use": "sig"},
		sign: func(b []byte) []byte {
			sum := sha256.Sum256(b)
			sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
			if err != nil {
				panic(err)
			}
			return sig
		}}
}

func esSigner(t *testing.T, kid string) *signer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := key.PublicKey.Bytes() // 0x04 || X || Y
	return &signer{alg: "ES256", kid: kid, jwk: map[string]any{"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(raw[1:33]), "y": b64(raw[33:])},
		sign: func(b []byte) []byte {
			sum := sha256.Sum256(b)
			r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
			if err != nil {
				panic(err)
			}
			sig := make([]byte, 64)
			r.FillBytes(sig[:32])
			s.FillBytes(sig[32:])
			return sig
		}}
}

func (s *signer) token(header, claims map[string]any) string {
	h := map[string]any{"alg": s.alg, "typ": "JWT", "kid": s.kid}
	for k, v := range header {
		h[k] = v
	}
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(claims)
	signed := b64(hb) + "." + b64(cb)
	return signed + "." + b64(s.sign([]byte(signed)))
}

func writeJWKS(t *testing.T, path string, signers ...*signer) {
	t.Helper()
	var keys []any
	for _, s := range signers {
		keys = append(keys, s.jwk)
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func claims(sub string, exp time.Duration, extra map[string]any) map[string]any {
	c := map[string]any{"iss": "https://issuer.test", "aud": "mcpcancel", "sub": sub, "exp": time.Now().Add(exp).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func authenticate(a gateway.Authenticator, token string) (string, error) {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return a.Authenticate(r)
}

// Every algorithm, each with its kid; every way a token can be wrong.
func TestJWTVerification(t *testing.T) {
	hs, rs, es := hsSigner(t, "h1"), rsSigner(t, "r1"), esSigner(t, "e1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, hs, rs, es)
	auth, err := gateway.NewJWKS(file, gateway.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*signer{hs, rs, es} {
		p, err := authenticate(auth, s.token(nil, claims("alice", time.Minute, nil)))
		if err != nil || p != "jwt:https://issuer.test:alice" {
			t.Fatalf("%s: principal %q, %v", s.alg, p, err)
		}
	}
	if p, err := authenticate(auth, es.token(nil, claims("bob", time.Minute, map[string]any{"aud": []string{"other", "mcpcancel"}}))); err != nil || p != "jwt:https://issuer.test:bob" {
		t.Fatalf("audience list: %q, %v", p, err)
	}
	// Within the leeway, an expired token still passes; past it, not.
	if _, err := authenticate(auth, hs.token(nil, claims("alice", -10*time.Second, nil))); err != nil {
		t.Fatalf("expired 10s ago, inside the leeway: %v", err)
	}
	// The RSA public key, used as an HMAC secret, must not verify.
	n, _ := base64.RawURLEncoding.DecodeString(rs.jwk["n"].(string))
	confused := &signer{alg: "HS256", kid: "r1", sign: func(b []byte) []byte {
		m := hmac.New(sha256.New, n)
		m.Write(b)
		return m.Sum(nil)
	}}
	bad := map[string]string{
		"missing":            "",
		"garbage":            "not-a-jwt",
		"expired":            rs.token(nil, claims("alice", -time.Hour, nil)),
		"no exp":             rs.token(nil, claims("alice", time.Hour, map[string]any{"exp": nil})),
		"not yet valid":      rs.token(nil, claims("alice", time.Hour, map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})),
		"other issuer":       es.token(nil, claims("alice", time.Hour, map[string]any{"iss": "https://evil.test"})),
		"other audience":     es.token(nil, claims("alice", time.Hour, map[string]any{"aud": "someone-else"})),
		"no subject":         es.token(nil, claims("", time.Hour, nil)),
		"control in subject": es.token(nil, claims("al\nice", time.Hour, nil)),
		"alg none":           unsigned(hs.token(map[string]any{"alg": "none"}, claims("alice", time.Hour, nil))),
		"critical extension": hs.token(map[string]any{"crit": []string{"exp"}}, claims("alice", time.Hour, nil)),
		"kid of another key": hs.token(map[string]any{"kid": "e1"}, claims("alice", time.Hour, nil)),
		"alg confusion":      confused.token(nil, claims("alice", time.Hour, nil)),
		"unknown key":        hsSigner(t, "h1").token(nil, claims("alice", time.Hour, nil)),
		"tampered claims":    tamper(es.token(nil, claims("alice", time.Hour, nil))),
	}
	for name, token := range bad {
		if p, err := authenticate(auth, token); err == nil {
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
		if _, err := gateway.NewJWKS(path, gateway.JWTOptions{Issuer: "i", Audience: "a"}); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	path := filepath.Join(dir, "ok")
	writeJWKS(t, path, hsSigner(t, "k"))
	if _, err := gateway.NewJWKS(path, gateway.JWTOptions{Issuer: "i"}); err == nil {
		t.Error("no audience: accepted")
	}
}

// countingConn dials target and counts the calls that leave through it.
func countingConn(t *testing.T, target string, n *atomic.Int64) pb.CoordinatorServiceClient {
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
	return pb.NewCoordinatorServiceClient(conn)
}

// Through the real gateway: tokens that fail get 401 and no coordinator
// call at all; a good one runs a call whose audit names the JWT
// principal; the JWKS file is reread when keys rotate; and a tokens file
// works beside it.
func TestJWTGateway(t *testing.T) {
	old, fresh := esSigner(t, "2025"), rsSigner(t, "2026")
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, old)
	jwks, err := gateway.NewJWKS(file, gateway.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel"})
	if err != nil {
		t.Fatal(err)
	}
	tokensPath := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokensPath, []byte("static-token ops\n"), 0o600)
	tokens, err := gateway.NewTokenFile(tokensPath)
	if err != nil {
		t.Fatal(err)
	}
	st := newStack(t, stackOptions{})
	var calls atomic.Int64
	_, url := testcluster.StartGateway(t, countingConn(t, st.coord.Addr, &calls), gateway.Options{Authenticator: gateway.AnyOf(tokens, jwks)})
	// Run opens two streams, WatchTools and WatchSessionNotifications, and
	// calls nothing else on its own.
	waitFor(t, "the gateway to watch the tools and the notes", func() bool { return calls.Load() >= 2 })
	before, rev := calls.Load(), st.revision(t)
	for name, token := range map[string]string{
		"missing": "",
		"invalid": "eyJhbGciOiJub25lIn0.e30.",
		"expired": old.token(nil, claims("alice", -time.Hour, nil)),
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
	good := old.token(nil, claims("alice", time.Hour, nil))
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
	writeJWKS(t, file, fresh)
	later := time.Now().Add(time.Minute)
	os.Chtimes(file, later, later)
	if resp, _ := authedPost(t, url, good, "", initBody); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token of a removed key: %d", resp.StatusCode)
	}
	if resp, _ := authedPost(t, url, fresh.token(nil, claims("alice", time.Hour, nil)), "", initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("a token of the new key: %d", resp.StatusCode)
	}
}

// libSigner signs with golang-jwt, for the algorithms the hand-made
// signers above do not cover.
func libSigner(t *testing.T, alg, kid string) (*signer, jwt.SigningMethod, any) {
	t.Helper()
	var key any
	var jwk map[string]any
	switch alg {
	case "PS256":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		key, jwk = k, map[string]any{"kty": "RSA", "kid": kid, "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes()), "alg": "PS256"}
	case "ES384":
		k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := k.PublicKey.Bytes()
		key, jwk = k, map[string]any{"kty": "EC", "crv": "P-384", "kid": kid, "x": b64(raw[1:49]), "y": b64(raw[49:])}
	case "EdDSA":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key, jwk = priv, map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(pub)}
	}
	method := jwt.GetSigningMethod(alg)
	return &signer{alg: alg, kid: kid, jwk: jwk, sign: func(b []byte) []byte {
		sig, err := method.Sign(string(b), key)
		if err != nil {
			panic(err)
		}
		return sig
	}}, method, key
}

// PS256, ES384 and EdDSA verify; a key's own "alg" binds it (a PS256
// key does not verify RS256 tokens); with Types set, only those "typ"
// headers pass (RFC 9068); scopes come from "scope" and "scp".
func TestJWTAlgorithmsAndTypes(t *testing.T) {
	ps, _, psKey := libSigner(t, "PS256", "p1")
	es, _, _ := libSigner(t, "ES384", "e1")
	ed, _, _ := libSigner(t, "EdDSA", "d1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, ps, es, ed)
	auth, err := gateway.NewJWKS(file, gateway.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*signer{ps, es, ed} {
		if p, err := authenticate(auth, s.token(nil, claims("alice", time.Minute, nil))); err != nil || p != "jwt:https://issuer.test:alice" {
			t.Fatalf("%s: %q, %v", s.alg, p, err)
		}
	}
	rs := &signer{alg: "RS256", kid: "p1", sign: func(b []byte) []byte {
		sig, _ := jwt.SigningMethodRS256.Sign(string(b), psKey)
		return sig
	}}
	if _, err := authenticate(auth, rs.token(nil, claims("alice", time.Minute, nil))); err == nil {
		t.Fatal("an RS256 token verified with a key whose alg is PS256")
	}

	typed, err := gateway.NewJWKS(file, gateway.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel", Types: []string{"at+jwt", "application/at+jwt"}})
	if err != nil {
		t.Fatal(err)
	}
	for typ, ok := range map[string]bool{"at+jwt": true, "AT+JWT": true, "application/at+jwt": true, "JWT": false, "": false} {
		if _, err := authenticate(typed, es.token(map[string]any{"typ": typ}, claims("alice", time.Minute, nil))); (err == nil) != ok {
			t.Errorf("typ %q: %v, want accepted %v", typ, err, ok)
		}
	}

	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+ed.token(nil, claims("alice", time.Minute, map[string]any{
		"scope": "mcp tools:echo", "scp": []string{"tools:echo", "files:read", "bad scope", `q"uote`},
	})))
	id, err := auth.Identify(r)
	if err != nil || !slices.Equal(id.Scopes, []string{"mcp", "tools:echo", "files:read"}) {
		t.Fatalf("scopes: %+v, %v", id, err)
	}
}
