package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2/clientcredentials"
	"google.golang.org/grpc"

	"github.com/mcpcancel/mcpcancel/gateway"
)

// provider is a real OpenID provider running in the test: zitadel/oidc's
// op package over the in-memory storage of its example server. The
// example's storage issues opaque tokens to its service users and never
// rotates its key, so provider overrides just that: one client whose
// client-credentials tokens are JWTs (RFC 9068 style, with a "scope"
// claim) for the audience the test names, with a lifetime the test
// names, signed by a key the test can rotate. Discovery, the token
// endpoint, client authentication, signing and the keys endpoint are
// zitadel's.
type provider struct {
	*storage.Storage
	issuer, clientID, secret string

	mu       sync.Mutex
	key      *rsa.PrivateKey
	kid      string
	audience string
	ttl      time.Duration
}

func startProvider(t *testing.T, audience string) *provider {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	p := &provider{
		Storage: storage.NewStorage(storage.NewUserStore("http://" + srv.Listener.Addr().String())),
		issuer:  "http://" + srv.Listener.Addr().String(), clientID: "robot", secret: "s3cret-robot",
		audience: audience, ttl: 5 * time.Minute,
	}
	p.rotate(t)
	config := &op.Config{CryptoKey: sha256.Sum256([]byte("test")), CodeMethodS256: true, AuthMethodPost: true}
	h, err := op.NewOpenIDProvider(p.issuer, config, p, op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

// rotate replaces the signing key: only the new one is published.
func (p *provider) rotate(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.key, p.kid = key, rand.Text()
}

func (p *provider) set(audience string, ttl time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.audience, p.ttl = audience, ttl
}

type signingKey struct {
	kid string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.kid }
func (k signingKey) Use() string                                 { return "sig" }

type publicKey struct{ signingKey }

func (k publicKey) Key() any { return &k.key.PublicKey }

func (p *provider) SigningKey(context.Context) (op.SigningKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return signingKey{p.kid, p.key}, nil
}

func (p *provider) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (p *provider) KeySet(context.Context) ([]op.Key, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return []op.Key{publicKey{signingKey{p.kid, p.key}}}, nil
}

func (p *provider) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	if id != p.clientID || secret != p.secret {
		return nil, oidc.ErrInvalidClient()
	}
	return robot{id}, nil
}

func (p *provider) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &oidc.JWTTokenRequest{Subject: id, Audience: []string{p.audience}, Scopes: scopes}, nil
}

func (p *provider) CreateAccessToken(ctx context.Context, r op.TokenRequest) (string, time.Time, error) {
	id, _, err := p.Storage.CreateAccessToken(ctx, r)
	p.mu.Lock()
	defer p.mu.Unlock()
	return id, time.Now().Add(p.ttl), err
}

func (p *provider) GetPrivateClaimsFromScopes(_ context.Context, _, _ string, scopes []string) (map[string]any, error) {
	return map[string]any{"scope": strings.Join(scopes, " ")}, nil
}

// robot is the provider's one client: client credentials, JWT tokens.
type robot struct{ id string }

func (r robot) GetID() string                                          { return r.id }
func (robot) RedirectURIs() []string                                   { return nil }
func (robot) PostLogoutRedirectURIs() []string                         { return nil }
func (robot) ApplicationType() op.ApplicationType                      { return op.ApplicationTypeWeb }
func (robot) AuthMethod() oidc.AuthMethod                              { return oidc.AuthMethodBasic }
func (robot) ResponseTypes() []oidc.ResponseType                       { return nil }
func (robot) GrantTypes() []oidc.GrantType                             { return []oidc.GrantType{oidc.GrantTypeClientCredentials} }
func (robot) LoginURL(string) string                                   { return "" }
func (robot) AccessTokenType() op.AccessTokenType                      { return op.AccessTokenTypeJWT }
func (robot) IDTokenLifetime() time.Duration                           { return time.Hour }
func (robot) DevMode() bool                                            { return false }
func (robot) RestrictAdditionalIdTokenScopes() func([]string) []string { return same }
func (robot) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return same
}
func (robot) IsScopeAllowed(string) bool           { return true }
func (robot) IDTokenUserinfoClaimsAssertion() bool { return false }
func (robot) ClockSkew() time.Duration             { return 0 }

func same(s []string) []string { return s }

// token gets a client-credentials token from the provider's token
// endpoint, found in its discovery document, with x/oauth2.
func (p *provider) token(t *testing.T, scopes ...string) string {
	t.Helper()
	cc := clientcredentials.Config{ClientID: p.clientID, ClientSecret: p.secret, TokenURL: p.tokenEndpoint(t), Scopes: scopes}
	tok, err := cc.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

// expiredToken gets a token issued already expired. x/oauth2 cannot
// read the response (zitadel writes the negative expires_in as an
// unsigned number), so this one request is made by hand.
func (p *provider) expiredToken(t *testing.T) string {
	t.Helper()
	p.mu.Lock()
	p.ttl = -time.Minute
	p.mu.Unlock()
	defer p.set(p.audience, 5*time.Minute)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.tokenEndpoint(t),
		strings.NewReader(url.Values{"grant_type": {"client_credentials"}, "scope": {"mcp"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(p.clientID, p.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("expired token: %d %v", resp.StatusCode, err)
	}
	return tok.AccessToken
}

// tokenEndpoint reads the provider's discovery document.
func (p *provider) tokenEndpoint(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(p.issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		TokenEndpoint string `json:"token_endpoint"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.TokenEndpoint
}

// startAuthedGateway starts a gateway whose options may name its own URL
// (the resource, the audience), which is known only once it listens.
func startAuthedGateway(t *testing.T, coord grpc.ClientConnInterface, build func(url string) gateway.Options) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	url := "http://" + srv.Listener.Addr().String() + "/mcp"
	opts := build(url)
	opts.Coordinator = coord
	g := gateway.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }() // owned: stopped and awaited in the cleanup
	srv.Config.Handler = g.Mux()
	srv.Start()
	t.Cleanup(func() {
		g.Close()
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	return url
}
