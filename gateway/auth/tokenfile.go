package auth

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
)

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
			return nil, fmt.Errorf("auth: tokens file line %d: want TOKEN PRINCIPAL", n)
		}
		tokens[fields[0]] = fields[1]
	}
	return tokens, sc.Err()
}
