package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"
	"unicode"
)

// JWTOptions configures a JWKS authenticator. Issuer and Audience are
// required: a token is accepted only if its "iss" equals Issuer and its
// "aud" is or contains Audience.
type JWTOptions struct {
	Issuer, Audience string
	// Leeway tolerates clock skew on "exp" and "nbf" (default 30s).
	Leeway time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// JWKS authenticates JSON Web Tokens (RFC 7519) signed with HS256, RS256
// or ES256 by a key of a JWKS file (RFC 7517: kty "oct", "RSA" or "EC"
// with crv "P-256"). A token naming a "kid" is checked only against the
// key with that kid, and only if the key's type fits the token's alg, so
// an RSA public key can never be used as an HMAC secret. "exp" is
// required, "nbf" checked when present. The principal is
// "jwt:<iss>:<sub>", so that a token's subject can never pose as a
// principal of the tokens file. The file is reread when it changes.
type JWKS struct {
	opts JWTOptions
	keys *watchedFile[[]jwk]
}

// jwk is one usable key of the set.
type jwk struct {
	kid, alg string // alg: the only algorithm this key verifies
	secret   []byte
	rsa      *rsa.PublicKey
	ec       *ecdsa.PublicKey
}

// NewJWKS reads the key set at path and returns an authenticator backed
// by it.
func NewJWKS(path string, opts JWTOptions) (*JWKS, error) {
	if opts.Issuer == "" || opts.Audience == "" {
		return nil, errors.New("gateway: JWT authentication needs an issuer and an audience")
	}
	if opts.Leeway == 0 {
		opts.Leeway = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	keys, err := newWatchedFile(path, "JWKS file", parseJWKS)
	if err != nil {
		return nil, err
	}
	return &JWKS{opts: opts, keys: keys}, nil
}

// Authenticate implements Authenticator.
func (j *JWKS) Authenticate(r *http.Request) (string, error) {
	token, ok := bearer(r)
	if !ok {
		return "", ErrUnauthenticated
	}
	keys, err := j.keys.get()
	if err != nil {
		return "", err
	}
	return j.verify(token, keys)
}

type jwtHeader struct {
	Alg  string   `json:"alg"`
	Kid  string   `json:"kid"`
	Crit []string `json:"crit"` // extensions this verifier would have to know: none are
}

type jwtClaims struct {
	Iss string          `json:"iss"`
	Sub string          `json:"sub"`
	Aud json.RawMessage `json:"aud"`
	Exp *json.Number    `json:"exp"`
	Nbf *json.Number    `json:"nbf"`
}

// verify checks token's signature and claims and returns its principal.
// Every failure is ErrUnauthenticated, wrapped with what was wrong.
func (j *JWKS) verify(token string, keys []jwk) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("%w: not a JWT", ErrUnauthenticated)
	}
	var h jwtHeader
	if err := decodeSegment(parts[0], &h); err != nil {
		return "", err
	}
	if h.Crit != nil {
		return "", fmt.Errorf("%w: critical header extensions %q are not supported", ErrUnauthenticated, h.Crit)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", fmt.Errorf("%w: signature encoding", ErrUnauthenticated)
	}
	if !verifyWithAny(keys, h, []byte(parts[0]+"."+parts[1]), sig) {
		return "", fmt.Errorf("%w: bad signature or no key for alg %q kid %q", ErrUnauthenticated, h.Alg, h.Kid)
	}
	var c jwtClaims
	if err := decodeSegment(parts[1], &c); err != nil {
		return "", err
	}
	if err := j.checkClaims(&c); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	return "jwt:" + c.Iss + ":" + c.Sub, nil
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("%w: segment encoding", ErrUnauthenticated)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: segment is not a JSON object", ErrUnauthenticated)
	}
	return nil
}

func verifyWithAny(keys []jwk, h jwtHeader, signed, sig []byte) bool {
	for _, k := range keys {
		if k.alg == h.Alg && (h.Kid == "" || k.kid == h.Kid) && k.verify(signed, sig) {
			return true
		}
	}
	return false
}

func (k *jwk) verify(signed, sig []byte) bool {
	sum := sha256.Sum256(signed)
	switch k.alg {
	case "HS256":
		mac := hmac.New(sha256.New, k.secret)
		mac.Write(signed)
		return hmac.Equal(mac.Sum(nil), sig)
	case "RS256":
		return rsa.VerifyPKCS1v15(k.rsa, crypto.SHA256, sum[:], sig) == nil
	case "ES256":
		if len(sig) != 64 {
			return false
		}
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		return ecdsa.Verify(k.ec, sum[:], r, s)
	}
	return false
}

// maxPrincipalBytes is what the coordinator accepts as a principal.
const maxPrincipalBytes = 256

func (j *JWKS) checkClaims(c *jwtClaims) error {
	now := j.opts.Now()
	exp, err := numericDate(c.Exp)
	switch {
	case err != nil || c.Exp == nil:
		return errors.New("exp missing or not a number")
	case !now.Before(exp.Add(j.opts.Leeway)):
		return errors.New("token expired")
	}
	if c.Nbf != nil {
		nbf, err := numericDate(c.Nbf)
		if err != nil || now.Add(j.opts.Leeway).Before(nbf) {
			return errors.New("token not valid yet")
		}
	}
	switch {
	case c.Iss != j.opts.Issuer:
		return fmt.Errorf("issuer %q is not trusted", c.Iss)
	case !audienceHas(c.Aud, j.opts.Audience):
		return errors.New("token is not for this audience")
	case c.Sub == "" || strings.ContainsFunc(c.Sub, unicode.IsControl):
		return errors.New("sub missing or has control characters")
	case len("jwt:"+c.Iss+":"+c.Sub) > maxPrincipalBytes:
		return errors.New("sub too long")
	}
	return nil
}

func numericDate(n *json.Number) (time.Time, error) {
	if n == nil {
		return time.Time{}, errors.New("missing")
	}
	f, err := n.Float64()
	if err != nil || f < 0 || f > 1<<40 {
		return time.Time{}, errors.New("not a date")
	}
	return time.Unix(int64(f), 0), nil
}

// audienceHas says whether aud, a string or an array of strings, names want.
func audienceHas(aud json.RawMessage, want string) bool {
	var one string
	if json.Unmarshal(aud, &one) == nil {
		return one == want
	}
	var many []string
	if json.Unmarshal(aud, &many) != nil {
		return false
	}
	for _, a := range many {
		if a == want {
			return true
		}
	}
	return false
}

// rawJWK is a key as a JWKS file holds it.
type rawJWK struct {
	Kty, Kid, Alg, Use string
	K, N, E, Crv, X, Y string
}

// parseJWKS reads a JWK set. Keys meant for other uses ("use" not "sig")
// or of unsupported types are skipped; a malformed supported key is an
// error, as is a set with no usable key.
func parseJWKS(b []byte) ([]jwk, error) {
	var set struct{ Keys []rawJWK }
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("gateway: JWKS file: %w", err)
	}
	var keys []jwk
	for i, r := range set.Keys {
		if r.Use != "" && r.Use != "sig" {
			continue
		}
		k, err := r.key()
		if err != nil {
			return nil, fmt.Errorf("gateway: JWKS file: key %d (kid %q): %w", i, r.Kid, err)
		}
		if k != nil {
			keys = append(keys, *k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("gateway: JWKS file: no HS256, RS256 or ES256 signing key")
	}
	return keys, nil
}

// key converts r, or returns nil for a key type this gateway does not use.
func (r rawJWK) key() (*jwk, error) {
	b64 := base64.RawURLEncoding.DecodeString
	k := &jwk{kid: r.Kid}
	switch r.Kty {
	case "oct":
		k.alg = "HS256"
		secret, err := b64(r.K)
		if err != nil || len(secret) < 32 {
			return nil, errors.New(`"k" must be base64url of at least 32 bytes`)
		}
		k.secret = secret
	case "RSA":
		k.alg = "RS256"
		n, err1 := b64(r.N)
		e, err2 := b64(r.E)
		if err1 != nil || err2 != nil || len(n) < 256 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New(`"n" and "e" must be base64url, with a modulus of at least 2048 bits`)
		}
		k.rsa = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	case "EC":
		k.alg = "ES256"
		pub, err := ecKey(r)
		if err != nil {
			return nil, err
		}
		k.ec = pub
	default:
		return nil, nil
	}
	if r.Alg != "" && r.Alg != k.alg {
		return nil, nil // meant for an algorithm this gateway does not use
	}
	return k, nil
}

func ecKey(r rawJWK) (*ecdsa.PublicKey, error) {
	x, err1 := base64.RawURLEncoding.DecodeString(r.X)
	y, err2 := base64.RawURLEncoding.DecodeString(r.Y)
	if r.Crv != "P-256" || err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
		return nil, errors.New(`an EC key must be crv "P-256" with 32-byte "x" and "y"`)
	}
	// ParseUncompressedPublicKey rejects a point that is not on the curve.
	raw := append(append([]byte{4}, x...), y...)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return nil, errors.New("the EC point is not on P-256")
	}
	return pub, nil
}
