package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Credentials are the adapter's own credentials for an HTTP upstream.
// The gateway never passes a client's token to a worker, so the adapter
// has none to pass on: an upstream that wants authentication gets these
// (the MCP spec forbids token passthrough). Set at most one field.
type Credentials struct {
	// HeaderFile is a secret file holding one header, "Name: value" (such
	// as "X-Api-Key: k" or "Authorization: Bearer t"), or only a token,
	// sent as "Authorization: Bearer TOKEN". It is read again when it
	// changes, so a mounted secret can be rotated without a restart.
	HeaderFile string
	// ClientCredentials gets and refreshes an access token with the OAuth
	// client-credentials grant (golang.org/x/oauth2/clientcredentials);
	// set EndpointParams "resource" to the upstream's URL for RFC 8707.
	ClientCredentials *clientcredentials.Config
}

// HTTPClient returns a client sending the credentials on every request,
// over base's transport (nil: http.DefaultClient's). Use it as
// Options.HTTPClient.
func (c Credentials) HTTPClient(base *http.Client) (*http.Client, error) {
	if base == nil {
		base = http.DefaultClient
	}
	switch {
	case c.HeaderFile != "" && c.ClientCredentials != nil:
		return nil, errors.New("upstream: set one of Credentials.HeaderFile and Credentials.ClientCredentials")
	case c.HeaderFile != "":
		h := &headerFile{path: c.HeaderFile}
		if _, _, err := h.header(); err != nil {
			return nil, err
		}
		out := *base
		out.Transport = &headerTransport{h: h, base: transportOf(base)}
		return &out, nil
	case c.ClientCredentials != nil:
		ctx := context.WithValue(context.Background(), oauth2.HTTPClient, base)
		return c.ClientCredentials.Client(ctx), nil
	}
	return base, nil
}

func transportOf(c *http.Client) http.RoundTripper {
	if c.Transport != nil {
		return c.Transport
	}
	return http.DefaultTransport
}

// headerTransport adds the header of a file to each request.
type headerTransport struct {
	h    *headerFile
	base http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	name, value, err := t.h.header()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
	r.Header.Set(name, value)
	return t.base.RoundTrip(r)
}

// headerFile is a header read from a file, read again when the file's
// modification time or size changes; a file that can no longer be read
// keeps the header read last.
type headerFile struct {
	path string

	mu          sync.Mutex
	modTime     time.Time
	size        int64
	name, value string
}

func (h *headerFile) header() (string, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, err := os.Stat(h.path)
	if err != nil {
		return h.name, h.value, h.lastOr(err)
	}
	if h.name != "" && st.ModTime().Equal(h.modTime) && st.Size() == h.size {
		return h.name, h.value, nil
	}
	b, err := os.ReadFile(h.path)
	if err != nil {
		return h.name, h.value, h.lastOr(err)
	}
	name, value, err := parseHeader(string(b))
	if err != nil {
		return h.name, h.value, h.lastOr(fmt.Errorf("upstream: header file %s: %w", h.path, err))
	}
	h.name, h.value, h.modTime, h.size = name, value, st.ModTime(), st.Size()
	return name, value, nil
}

// lastOr is nil when a header was read before (it stays in use), else err.
func (h *headerFile) lastOr(err error) error {
	if h.name != "" {
		return nil
	}
	return err
}

// parseHeader reads "Name: value", or a bare token as a bearer token.
func parseHeader(s string) (string, string, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, "\r\n") {
		return "", "", errors.New("want one line: \"Name: value\" or a token")
	}
	name, value, ok := strings.Cut(s, ":")
	if !ok || strings.ContainsAny(name, " \t") {
		return "Authorization", "Bearer " + s, nil
	}
	name, value = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)), strings.TrimSpace(value)
	if name == "" || value == "" {
		return "", "", errors.New("want one line: \"Name: value\" or a token")
	}
	return name, value, nil
}
