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
// ErrUnauthenticated. A nil Authenticator makes every client "anonymous".
type Authenticator interface {
	Authenticate(r *http.Request) (principal string, err error)
}

// TokenFile authenticates bearer tokens listed in a file, one
// "TOKEN PRINCIPAL" pair per line ('#' starts a comment). The file is read
// again when its modification time changes, so tokens can be rotated
// without a restart.
type TokenFile struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	tokens  map[string]string
}

// NewTokenFile reads path and returns an authenticator backed by it.
func NewTokenFile(path string) (*TokenFile, error) {
	f := &TokenFile{path: path}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Authenticate implements Authenticator.
func (f *TokenFile) Authenticate(r *http.Request) (string, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return "", ErrUnauthenticated
	}
	if err := f.reload(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, principal := range f.tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			return principal, nil
		}
	}
	return "", ErrUnauthenticated
}

// reload rereads the file if it changed. A file that cannot be read or
// parsed keeps the tokens last read.
func (f *TokenFile) reload() error {
	st, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("gateway: tokens file: %w", err)
	}
	f.mu.Lock()
	same := st.ModTime().Equal(f.modTime) && f.tokens != nil
	f.mu.Unlock()
	if same {
		return nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("gateway: tokens file: %w", err)
	}
	tokens, err := parseTokens(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.tokens, f.modTime = tokens, st.ModTime()
	f.mu.Unlock()
	return nil
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
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="mcpcancel", error="invalid_token", error_description="a valid bearer token is required"`)
	w.Header().Set("Content-Type", contentJSON)
	w.WriteHeader(http.StatusUnauthorized)
	w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"unauthorized: a valid bearer token is required"}}`))
	return "", false
}
