package auth_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/jwttest"
)

// jwksServer serves a key set that the test can change, and counts the
// fetches.
type jwksServer struct {
	mu      sync.Mutex
	body    []byte
	status  int
	fetches atomic.Int64
	url     string
}

func startJWKSServer(t *testing.T, signers ...*jwttest.Signer) *jwksServer {
	t.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.set(signers...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.WriteHeader(s.status)
		w.Write(s.body)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/keys"
	return s
}

func (s *jwksServer) set(signers ...*jwttest.Signer) {
	var keys []any
	for _, sg := range signers {
		keys = append(keys, sg.JWK)
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	s.serve(http.StatusOK, b)
}

func (s *jwksServer) serve(status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

func remoteOpts(url string) auth.JWTOptions {
	return auth.JWTOptions{Issuer: "https://issuer.test", Audience: "mcpcancel", JWKSURL: url, RefreshInterval: time.Hour}
}

// A key set from a URL: a token of a key added later is accepted once
// the set is fetched again on its unknown kid; many tokens with made-up
// kids cost one fetch per floor, not one each; a set that becomes
// unusable (an error status, too large, too many keys, no usable key)
// leaves the keys fetched last in use; and one like that at the start is
// an error.
func TestRemoteJWKS(t *testing.T) {
	old, added := jwttest.ES256(t, "old"), jwttest.RS256(t, "added")
	srv := startJWKSServer(t, old)
	opts := remoteOpts(srv.url)
	opts.RefreshFloor = time.Hour
	v, err := auth.NewRemoteJWKS(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	if _, err := authenticate(v, old.Token(nil, claims("alice", time.Minute, nil))); err != nil {
		t.Fatal(err)
	}
	srv.set(old, added)
	if _, err := authenticate(v, added.Token(nil, claims("alice", time.Minute, nil))); err != nil {
		t.Fatalf("a key added at the provider: %v", err)
	}
	before := srv.fetches.Load()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			authenticate(v, jwttest.HS256(t, fmt.Sprint("made-up-", i)).Token(nil, claims("alice", time.Minute, nil)))
		})
	}
	wg.Wait()
	if n := srv.fetches.Load() - before; n != 0 {
		t.Fatalf("50 tokens with unknown kids made %d fetches within the floor", n)
	}

	good, _ := json.Marshal(old.JWK) // each bad set below would be usable but for its flaw
	for name, bad := range map[string]func(){
		"error status": func() { srv.serve(http.StatusInternalServerError, []byte(`{"keys":[`+string(good)+`]}`)) },
		"too large": func() {
			srv.serve(http.StatusOK, []byte(`{"keys":[`+string(good)+`],"pad":"`+strings.Repeat("x", 1<<20)+`"}`))
		},
		"too many keys": func() {
			srv.serve(http.StatusOK, []byte(`{"keys":[`+strings.Repeat(string(good)+`,`, 64)+string(good)+`]}`))
		},
		"no usable key": func() {
			srv.serve(http.StatusOK, []byte(`{"keys":[{"kty":"oct","use":"enc","k":"`+b64(make([]byte, 32))+`"}]}`))
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad()
			fresh := remoteOpts(srv.url)
			fresh.RefreshFloor = time.Millisecond
			a, err := auth.NewRemoteJWKS(t.Context(), fresh)
			if err == nil {
				a.Close()
				t.Fatal("started with it")
			}
			srv.set(old)
			a, err = auth.NewRemoteJWKS(t.Context(), fresh)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			bad()
			authenticate(a, added.Token(nil, claims("alice", time.Minute, nil))) // an unknown kid: a fetch that fails
			if _, err := authenticate(a, old.Token(nil, claims("alice", time.Minute, nil))); err != nil {
				t.Fatalf("the last good keys were dropped: %v", err)
			}
		})
	}
}

// The keys URL is found in the issuer's metadata, in the order the MCP
// spec gives (RFC 8414 with path insertion first); metadata naming
// another issuer, or a jwks_uri over plain http off loopback, is not used.
func TestIssuerDiscovery(t *testing.T) {
	key := jwttest.ES256(t, "k")
	keys := startJWKSServer(t, key)
	var issuer string
	var mu sync.Mutex
	docs := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		doc, ok := docs[r.URL.Path]
		mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(doc))
	}))
	t.Cleanup(srv.Close)
	issuer = srv.URL + "/tenant"
	mu.Lock()
	meta := func(iss, jwks string) string { return fmt.Sprintf(`{"issuer":%q,"jwks_uri":%q}`, iss, jwks) }
	docs["/.well-known/oauth-authorization-server/tenant"] = meta("https://evil.test", keys.url)
	docs["/.well-known/openid-configuration/tenant"] = meta(issuer, "http://keys.example/jwks")
	docs["/tenant/.well-known/openid-configuration"] = meta(issuer, keys.url)
	mu.Unlock()
	opts := auth.JWTOptions{Issuer: issuer, Audience: "mcpcancel"}
	v, err := auth.NewRemoteJWKS(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := authenticate(v, key.Token(nil, claims("alice", time.Minute, map[string]any{"iss": issuer}))); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	delete(docs, "/tenant/.well-known/openid-configuration")
	mu.Unlock()
	if a, err := auth.NewRemoteJWKS(t.Context(), opts); err == nil {
		a.Close()
		t.Fatal("used metadata naming another issuer, or an http jwks_uri off loopback")
	}
}
