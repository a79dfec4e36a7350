package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// ErrUnauthenticated means a request carried no valid credentials.
var ErrUnauthenticated = errors.New("gateway: missing or invalid bearer token")

// Authenticator names the principal behind an HTTP request, or returns
// an error wrapping ErrUnauthenticated. A nil Authenticator makes every
// client "anonymous".
type Authenticator interface {
	Authenticate(r *http.Request) (principal string, err error)
}

// Identity is who a request's credentials name, and the OAuth scopes
// they grant. Handlers see it (Call.Principal, Call.Scopes); the token
// itself goes no further than the gateway.
type Identity struct {
	Principal string
	Scopes    []string
}

// IdentityAuthenticator is an Authenticator that also knows the scopes
// its credentials grant (a JWT's "scope" and "scp" claims).
type IdentityAuthenticator interface {
	Authenticator
	Identify(r *http.Request) (Identity, error)
}

// identify authenticates r with a: a nil a names everyone "anonymous".
func identify(a Authenticator, r *http.Request) (Identity, error) {
	switch a := a.(type) {
	case nil:
		return Identity{Principal: anonymous}, nil
	case IdentityAuthenticator:
		return a.Identify(r)
	default:
		p, err := a.Authenticate(r)
		return Identity{Principal: p}, err
	}
}

type identityKey struct{}

func withIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// identityFrom returns the identity principalOf put in ctx; stdio
// connections have none.
func identityFrom(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// AnyOf accepts a request that any of auths accepts, trying them in
// order (say a tokens file, then a JWKS).
func AnyOf(auths ...Authenticator) IdentityAuthenticator { return anyOf(auths) }

type anyOf []Authenticator

func (as anyOf) Authenticate(r *http.Request) (string, error) {
	id, err := as.Identify(r)
	return id.Principal, err
}

func (as anyOf) Identify(r *http.Request) (Identity, error) {
	err := ErrUnauthenticated
	for _, a := range as {
		id, e := identify(a, r)
		if e == nil {
			return id, nil
		}
		if !errors.Is(e, ErrUnauthenticated) || errors.Is(err, ErrUnauthenticated) {
			err = e // an internal failure outranks a refusal
		}
	}
	return Identity{}, err
}

// TokenFile authenticates bearer tokens listed in a file, one
// "TOKEN PRINCIPAL" pair per line ('#' starts a comment). The file is read
// again when it changes, so tokens can be rotated without a restart.
type TokenFile struct {
	tokens *watchedFile[map[string]string]
}

// NewTokenFile reads path and returns an authenticator backed by it.
func NewTokenFile(path string) (*TokenFile, error) {
	w, err := newWatchedFile(path, "tokens file", parseTokens)
	if err != nil {
		return nil, err
	}
	return &TokenFile{tokens: w}, nil
}

// Authenticate implements Authenticator.
func (f *TokenFile) Authenticate(r *http.Request) (string, error) {
	token, ok := bearer(r)
	if !ok {
		return "", ErrUnauthenticated
	}
	tokens, err := f.tokens.get()
	if err != nil {
		return "", err
	}
	for t, principal := range tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			return principal, nil
		}
	}
	return "", ErrUnauthenticated
}

// bearer returns the request's bearer token.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

func parseTokens(b []byte) (map[string]string, error) {
	tokens := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || len(fields[1]) > 128 {
			return nil, fmt.Errorf("gateway: tokens file line %d: want TOKEN PRINCIPAL", n)
		}
		tokens[fields[0]] = fields[1]
	}
	return tokens, sc.Err()
}

// watchedFile is the parsed content of a file, parsed again when the
// file's modification time or size changes. A file that cannot be read
// or parsed any more keeps the content last parsed (and the error is
// returned, so that it is logged).
type watchedFile[T any] struct {
	path, what string
	parse      func([]byte) (T, error)

	mu      sync.Mutex
	modTime time.Time
	size    int64
	val     T
}

func newWatchedFile[T any](path, what string, parse func([]byte) (T, error)) (*watchedFile[T], error) {
	w := &watchedFile[T]{path: path, what: what, parse: parse}
	if err := w.reloadLocked(); err != nil {
		return nil, err
	}
	return w, nil
}

// get returns the content, rereading the file if it changed.
func (w *watchedFile[T]) get() (T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.reloadLocked()
	return w.val, err
}

func (w *watchedFile[T]) reloadLocked() error {
	st, err := os.Stat(w.path)
	if err != nil {
		return fmt.Errorf("gateway: %s: %w", w.what, err)
	}
	if !w.modTime.IsZero() && st.ModTime().Equal(w.modTime) && st.Size() == w.size {
		return nil
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		return fmt.Errorf("gateway: %s: %w", w.what, err)
	}
	v, err := w.parse(b)
	if err != nil {
		return err
	}
	w.val, w.modTime, w.size = v, st.ModTime(), st.Size()
	return nil
}

// principalOf authenticates r, answering 401 when it fails. It returns
// the request carrying the caller's Identity, and false when the request
// must not go on.
func (h *httpTransport) principalOf(w http.ResponseWriter, r *http.Request) (string, *http.Request, bool) {
	id, err := identify(h.g.opts.Authenticator, r)
	if err == nil {
		return id.Principal, r.WithContext(withIdentity(r.Context(), id)), true
	}
	if !errors.Is(err, ErrUnauthenticated) {
		h.g.log.Error("authenticating a request", "err", err)
	} else {
		h.g.log.Debug("unauthenticated request", "err", err, "remote", r.RemoteAddr)
	}
	h.guard.unauthorized(w, r)
	return "", r, false
}
