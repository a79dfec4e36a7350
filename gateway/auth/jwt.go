package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// JWTOptions configures a JWT authenticator. Issuer and Audience are
// required: a token is accepted only if its "iss" equals Issuer and its
// "aud" is or contains Audience (the gateway's canonical URL, RFC 8707;
// a trailing slash is not significant).
type JWTOptions struct {
	Issuer, Audience string
	// Types, if set, are the "typ" headers accepted, compared without
	// case: RFC 9068 access tokens are "at+jwt" (or
	// "application/at+jwt"). Empty accepts any.
	Types []string
	// Leeway tolerates clock skew on "exp" and "nbf" (default 30s).
	Leeway time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	// For keys fetched from a URL (NewRemoteJWKS):
	// JWKSURL is where the keys are; empty finds it in the issuer's
	// metadata (RFC 8414, then OpenID Connect Discovery).
	JWKSURL string
	// RefreshInterval is how often the keys are fetched again (default
	// 15m); RefreshFloor the least time between fetches caused by tokens
	// naming an unknown kid (default 30s).
	RefreshInterval, RefreshFloor time.Duration
	// MaxKeys bounds a key set (default 64), MaxJWKSBytes its size
	// (default 1 MiB).
	MaxKeys      int
	MaxJWKSBytes int64
	// HTTPClient fetches metadata and keys (default: a client with a 10s
	// timeout).
	HTTPClient *http.Client
	// Logger; nil discards.
	Logger *slog.Logger
}

// check refuses options that name no issuer or no audience.
func (o *JWTOptions) check() error {
	if o.Issuer == "" || o.Audience == "" {
		return errors.New("auth: JWT authentication needs an issuer and an audience")
	}
	return nil
}

// setDefaults fills in the default of every zero field.
func (o *JWTOptions) setDefaults() {
	if o.Leeway == 0 {
		o.Leeway = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 15 * time.Minute
	}
	if o.RefreshFloor <= 0 {
		o.RefreshFloor = 30 * time.Second
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = defaultMaxKeys
	}
	if o.MaxJWKSBytes <= 0 {
		o.MaxJWKSBytes = defaultMaxJWKSSize
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: fetchTimeout}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// algorithms are the signature algorithms accepted; "none" never is.
var algorithms = []string{
	"HS256", "HS384", "HS512", "RS256", "RS384", "RS512",
	"PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
}

// JWKS authenticates JSON Web Tokens (RFC 7519) with golang-jwt, taking
// keys from a JWK set through keyfunc: from a file (NewJWKS) or a URL
// (NewRemoteJWKS). A token naming a "kid" is checked only against the
// key with that kid; the key's type must fit the token's "alg" (an RSA
// public key is never an HMAC secret), and so must the key's own "alg"
// when it has one. Tokens with "crit" headers are refused (no extension
// is understood), "exp" is required, "nbf" checked when present. The
// principal is "jwt:<iss>:<sub>", so that a token's subject can never
// pose as a principal of the tokens file; the scopes are those of the
// "scope" and "scp" claims.
type JWKS struct {
	opts   JWTOptions
	keys   keyfunc.Keyfunc
	file   *fileKeys   // nil for a URL
	remote *remoteKeys // nil for a file
	parser *jwt.Parser
}

// NewJWKS reads the key set at path (reread when it changes) and returns
// an authenticator backed by it.
func NewJWKS(path string, opts JWTOptions) (*JWKS, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	f, err := newFileKeys(path, opts.MaxKeys)
	if err != nil {
		return nil, err
	}
	return newJWKS(opts, f, f, nil)
}

// NewRemoteJWKS fetches the key set from opts.JWKSURL, or from the URL
// the issuer's metadata names, and keeps it fresh in the background
// until Close. It fails if the first fetch does.
func NewRemoteJWKS(ctx context.Context, opts JWTOptions) (*JWKS, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	u := opts.JWKSURL
	if u == "" {
		var err error
		if u, err = discoverJWKS(ctx, opts.HTTPClient, opts.Issuer); err != nil {
			return nil, err
		}
	}
	r, err := newRemoteKeys(ctx, u, &opts)
	if err != nil {
		return nil, err
	}
	return newJWKS(opts, r, nil, r)
}

func newJWKS(opts JWTOptions, store jwkset.Storage, f *fileKeys, r *remoteKeys) (*JWKS, error) {
	kf, err := keyfunc.New(keyfunc.Options{Storage: store})
	if err != nil {
		return nil, err
	}
	parser := jwt.NewParser(jwt.WithValidMethods(algorithms), jwt.WithIssuer(opts.Issuer),
		jwt.WithExpirationRequired(), jwt.WithLeeway(opts.Leeway), jwt.WithTimeFunc(opts.Now))
	return &JWKS{opts: opts, keys: kf, file: f, remote: r, parser: parser}, nil
}

// Close stops refreshing a remote key set. Idempotent.
func (j *JWKS) Close() error {
	if j.remote != nil {
		j.remote.Close()
	}
	return nil
}

// Authenticate implements Authenticator.
func (j *JWKS) Authenticate(r *http.Request) (string, error) {
	id, err := j.Identify(r)
	return id.Principal, err
}

// Identify implements IdentityAuthenticator.
func (j *JWKS) Identify(r *http.Request) (Identity, error) {
	token, ok := bearer(r)
	if !ok {
		return Identity{}, ErrUnauthenticated
	}
	if j.file != nil {
		if err := j.file.sync(r.Context()); err != nil {
			return Identity{}, err
		}
	}
	return j.verify(r.Context(), token)
}

// accessClaims are the claims read from a token.
type accessClaims struct {
	jwt.RegisteredClaims
	Scope scopeList `json:"scope"`
	Scp   scopeList `json:"scp"`
}

// scopeList is a scope claim: a space-separated string (RFC 9068
// "scope") or an array of strings (as some providers write "scp").
type scopeList []string

func (s *scopeList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = strings.Fields(one)
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("a scope claim is a string or an array of strings")
	}
	*s = many
	return nil
}

// verify checks token's signature and claims and returns who it names.
// Every failure is ErrUnauthenticated, wrapped with what was wrong.
func (j *JWKS) verify(ctx context.Context, token string) (Identity, error) {
	var c accessClaims
	_, err := j.parser.ParseWithClaims(token, &c, j.keyFor(ctx))
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if err := j.checkClaims(&c); err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	return Identity{Principal: "jwt:" + c.Issuer + ":" + c.Subject, Scopes: grantedScopes(c.Scope, c.Scp)}, nil
}

// keyFor checks the header's extensions and type, then finds the key.
func (j *JWKS) keyFor(ctx context.Context) jwt.Keyfunc {
	find := j.keys.KeyfuncCtx(ctx)
	return func(t *jwt.Token) (any, error) {
		if crit, ok := t.Header["crit"]; ok {
			return nil, fmt.Errorf("critical header extensions %v are not supported", crit)
		}
		if len(j.opts.Types) > 0 {
			typ, _ := t.Header["typ"].(string)
			if !slices.ContainsFunc(j.opts.Types, func(want string) bool { return strings.EqualFold(want, typ) }) {
				return nil, fmt.Errorf("token type %q is not one of %q", typ, j.opts.Types)
			}
		}
		return find(t)
	}
}

// maxPrincipalBytes is what the coordinator accepts as a principal.
const maxPrincipalBytes = 256

func (j *JWKS) checkClaims(c *accessClaims) error {
	switch {
	case !oauthex.MatchesResource(c.Audience, j.opts.Audience):
		return errors.New("token is not for this audience")
	case c.Subject == "" || strings.ContainsFunc(c.Subject, unicode.IsControl):
		return errors.New("sub missing or has control characters")
	case len("jwt:"+c.Issuer+":"+c.Subject) > maxPrincipalBytes:
		return errors.New("sub too long")
	}
	return nil
}

// maxScopes bounds the scopes kept of one token.
const maxScopes = 64

// grantedScopes merges the scope claims, without duplicates or values
// that are not scope tokens, at most maxScopes of them.
func grantedScopes(lists ...scopeList) []string {
	var out []string
	for _, l := range lists {
		for _, s := range l {
			if validScope(s) && !slices.Contains(out, s) && len(out) < maxScopes {
				out = append(out, s)
			}
		}
	}
	return out
}

// validScope says whether s is a scope token (RFC 6749 section 3.3: no
// space, quote or backslash) of at most 128 bytes, so that it can stand
// in a challenge.
func validScope(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c == '"' || c == '\\' || c > 0x7e {
			return false
		}
	}
	return true
}
