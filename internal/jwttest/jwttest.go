// Package jwttest signs JSON Web Tokens and writes the JWK sets that
// verify them, for tests of authentication. It signs by hand, not with a
// JWT library, so that tests can also make the tokens a library refuses
// to make (alg "none", a key used with the wrong algorithm).
//
//	s := jwttest.ES256(t, "k1")
//	jwttest.WriteJWKS(t, path, s)
//	token := s.Token(nil, jwttest.Claims("alice", time.Minute, nil))
package jwttest

import (
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
	"os"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// B64 is base64url without padding, as JWTs and JWKs encode bytes.
var B64 = base64.RawURLEncoding.EncodeToString

// Issuer and Audience are what Claims names by default.
const (
	Issuer   = "https://issuer.test"
	Audience = "mcpcancel"
)

// Signer makes tokens with one key and knows its JWK.
type Signer struct {
	Alg, KID string
	JWK      map[string]any
	Sign     func(signed []byte) []byte
}

// HS256 is a signer with a fresh 256-bit HMAC secret.
func HS256(t testing.TB, kid string) *Signer {
	secret := make([]byte, 32)
	rand.Read(secret)
	return &Signer{Alg: "HS256", KID: kid, JWK: map[string]any{"kty": "oct", "kid": kid, "k": B64(secret)},
		Sign: func(b []byte) []byte {
			m := hmac.New(sha256.New, secret)
			m.Write(b)
			return m.Sum(nil)
		}}
}

// RS256 is a signer with a fresh 2048-bit RSA key.
func RS256(t testing.TB, kid string) *Signer {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e := big.NewInt(int64(key.E)).Bytes()
	return &Signer{Alg: "RS256", KID: kid, JWK: map[string]any{"kty": "RSA", "kid": kid, "n": B64(key.N.Bytes()), "e": B64(e), "use": "sig"},
		Sign: func(b []byte) []byte {
			sum := sha256.Sum256(b)
			sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
			if err != nil {
				panic(err)
			}
			return sig
		}}
}

// ES256 is a signer with a fresh P-256 key.
func ES256(t testing.TB, kid string) *Signer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := key.PublicKey.Bytes() // 0x04 || X || Y
	return &Signer{Alg: "ES256", KID: kid, JWK: map[string]any{"kty": "EC", "crv": "P-256", "kid": kid, "x": B64(raw[1:33]), "y": B64(raw[33:])},
		Sign: func(b []byte) []byte {
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

// Lib is a signer that signs with golang-jwt, for the algorithms the
// hand-made signers do not cover: "PS256" (its JWK names its alg),
// "ES384" and "EdDSA". It also returns the private key.
func Lib(t testing.TB, alg, kid string) (*Signer, any) {
	t.Helper()
	var key any
	var jwk map[string]any
	switch alg {
	case "PS256":
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		key, jwk = k, map[string]any{"kty": "RSA", "kid": kid, "n": B64(k.N.Bytes()), "e": B64(big.NewInt(int64(k.E)).Bytes()), "alg": "PS256"}
	case "ES384":
		k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := k.PublicKey.Bytes()
		key, jwk = k, map[string]any{"kty": "EC", "crv": "P-384", "kid": kid, "x": B64(raw[1:49]), "y": B64(raw[49:])}
	case "EdDSA":
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key, jwk = priv, map[string]any{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": B64(pub)}
	default:
		t.Fatalf("jwttest: no library signer for %q", alg)
	}
	method := jwt.GetSigningMethod(alg)
	return &Signer{Alg: alg, KID: kid, JWK: jwk, Sign: func(b []byte) []byte {
		sig, err := method.Sign(string(b), key)
		if err != nil {
			panic(err)
		}
		return sig
	}}, key
}

// Token signs claims under a header naming the signer's alg and kid,
// with "typ" "JWT"; header's entries are added or override them.
func (s *Signer) Token(header, claims map[string]any) string {
	h := map[string]any{"alg": s.Alg, "typ": "JWT", "kid": s.KID}
	for k, v := range header {
		h[k] = v
	}
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(claims)
	signed := B64(hb) + "." + B64(cb)
	return signed + "." + B64(s.Sign([]byte(signed)))
}

// WriteJWKS writes the signers' JWKs to path as a JWK set.
func WriteJWKS(t testing.TB, path string, signers ...*Signer) {
	t.Helper()
	if err := os.WriteFile(path, Set(signers...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Set is the signers' JWKs as a JWK set.
func Set(signers ...*Signer) []byte {
	var keys []any
	for _, s := range signers {
		keys = append(keys, s.JWK)
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// Claims names sub, from Issuer to Audience, expiring exp from now;
// extra's entries are added, or removed when nil.
func Claims(sub string, exp time.Duration, extra map[string]any) map[string]any {
	c := map[string]any{"iss": Issuer, "aud": Audience, "sub": sub, "exp": time.Now().Add(exp).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}
