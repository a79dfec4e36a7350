package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// An old client trying the 2024-11-05 HTTP+SSE transport is told, in the
// response, that it is not served and where MCP is.
func TestHTTPSSE2024IsRefusedClearly(t *testing.T) {
	st := newStack(t, stackOptions{})
	base := strings.TrimSuffix(st.urls[0], "/mcp")
	for _, req := range []struct{ method, path string }{{http.MethodGet, "/sse"}, {http.MethodPost, "/messages?sessionId=x"}} {
		r, err := http.NewRequestWithContext(t.Context(), req.method, base+req.path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "2024-11-05 HTTP+SSE transport") || !strings.Contains(string(body), "/mcp") {
			t.Errorf("%s %s = %d %q; want 404 saying the transport is not served and where MCP is", req.method, req.path, resp.StatusCode, body)
		}
	}
}
