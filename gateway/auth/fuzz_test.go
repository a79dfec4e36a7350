package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var fuzzKey = []byte("0123456789abcdef0123456789abcdef")

func fuzzToken(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	signed := enc([]byte(`{"alg":"HS256","kid":"k"}`)) + "." + enc([]byte(claims))
	m := hmac.New(sha256.New, fuzzKey)
	m.Write([]byte(signed))
	return signed + "." + enc(m.Sum(nil))
}

// JWTs from clients: verification never panics, and whatever it accepts
// has a subject, names the one trusted issuer, and grants only scopes
// that are scope tokens.
func FuzzJWT(f *testing.F) {
	file := filepath.Join(f.TempDir(), "jwks.json")
	k := base64.RawURLEncoding.EncodeToString(fuzzKey)
	os.WriteFile(file, []byte(`{"keys":[{"kty":"oct","kid":"k","k":"`+k+`"}]}`), 0o600)
	auth, err := NewJWKS(file, JWTOptions{Issuer: "iss", Audience: "aud", Now: func() time.Time { return time.Unix(1e9, 0) }})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fuzzToken(`{"iss":"iss","aud":"aud","sub":"a","exp":2000000000}`))
	f.Add(fuzzToken(`{"iss":"iss","aud":["x","aud"],"sub":"a","exp":2e9,"nbf":1}`))
	f.Add(fuzzToken(`{"iss":"iss","aud":"aud","sub":"a","exp":1}`))
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		id, err := auth.verify(t.Context(), token)
		if err != nil {
			return
		}
		p := id.Principal
		if !strings.HasPrefix(p, "jwt:iss:") || len(p) == len("jwt:iss:") || len(p) > maxPrincipalBytes {
			t.Fatalf("accepted %q as %q", token, p)
		}
		for _, s := range id.Scopes {
			if !validScope(s) {
				t.Fatalf("accepted %q with scope %q, which cannot stand in a challenge", token, s)
			}
		}
	})
}

// JWK sets from a file or an identity provider: parsing never panics,
// and a set it accepts has at least one and at most maxKeys keys, each
// for signing and strong enough.
func FuzzKeySetKeepsOnlyStrongSigningKeys(f *testing.F) {
	k := base64.RawURLEncoding.EncodeToString(fuzzKey)
	f.Add([]byte(`{"keys":[{"kty":"oct","kid":"k","k":"` + k + `"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"c2hvcnQ"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"},{"kty":"OKP","crv":"Ed25519","x":"AA"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","use":"enc"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseKeySet(b, 4)
		if err != nil {
			return
		}
		if len(keys) == 0 || len(keys) > 4 {
			t.Fatalf("accepted %d keys", len(keys))
		}
		for _, key := range keys {
			if u := key.Marshal().USE; u != "" && u != "sig" {
				t.Fatalf("accepted a key for %q", u)
			}
			if err := strongEnough(key.Key()); err != nil {
				t.Fatalf("accepted a weak key: %v", err)
			}
		}
	})
}
