package gateway

import (
	"bufio"
	"bytes"
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

// AnyOf accepts a request that any of auths accepts, trying them in
// order (say a tokens file, then a JWKS).
func AnyOf(auths ...Authenticator) Authenticator { return anyOf(auths) }

type anyOf []Authenticator

func (as anyOf) Authenticate(r *http.Request) (string, error) {
	err := ErrUnauthenticated
	for _, a := range as {
		p, e := a.Authenticate(r)
		if e == nil {
			return p, nil
		}
		if !errors.Is(e, ErrUnauthenticated) || errors.Is(err, ErrUnauthenticated) {
			err = e // an internal failure outranks a refusal
		}
	}
	return "", err
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

// principalOf authenticates r, answering 401 when it fails. It reports
// false when the request must not go on.
func (h *httpTransport) principalOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	if h.g.opts.Authenticator == nil {
		return anonymous, true
	}
	p, err := h.g.opts.Authenticator.Authenticate(r)
	if err == nil {
		return p, true
	}
	if !errors.Is(err, ErrUnauthenticated) {
		h.g.log.Error("authenticating a request", "err", err)
	} else {
		h.g.log.Debug("unauthenticated request", "err", err, "remote", r.RemoteAddr)
	}
	// RFC 6750 section 3: no error code when no credentials were sent.
	challenge := `Bearer realm="mcpcancel"`
	if r.Header.Get("Authorization") != "" {
		challenge += `, error="invalid_token", error_description="the bearer token is invalid or expired"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Content-Type", contentJSON)
	w.WriteHeader(http.StatusUnauthorized)
	w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"unauthorized: a valid bearer token is required"}}`))
	return "", false
}
