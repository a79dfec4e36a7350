package upstream

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// A cancel is the adapter's best effort: the specification lets a server
// ignore one, and over 2026-07-28 Streamable HTTP the closed request
// stream is the cancel itself. Yet the SDK's HTTP connection takes any
// refused POST for a broken connection, and mcp-go's server refuses a
// 2026-07-28 notifications/cancelled with 400, so each cancel cost the
// whole upstream session and failed the other calls on it. The adapter's
// HTTP client answers a refused cancel as accepted instead.

// forgiveCancels wraps rt so that a server's refusal (4xx) of a POSTed
// notifications/cancelled reads as 202 Accepted.
func forgiveCancels(rt http.RoundTripper) http.RoundTripper { return cancelForgiver{rt} }

type cancelForgiver struct{ base http.RoundTripper }

func (t cancelForgiver) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 || resp.StatusCode >= 500 || !isCancel(req) {
		return resp, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.StatusCode, resp.Status = http.StatusAccepted, "202 Accepted"
	resp.Header = http.Header{}
	resp.Body, resp.ContentLength = http.NoBody, 0
	return resp, nil
}

// isCancel says whether req POSTs a notifications/cancelled: its
// Mcp-Method header (2026-07-28) or its body says so.
func isCancel(req *http.Request) bool {
	if req.Method != http.MethodPost {
		return false
	}
	if m := req.Header.Get(mcpspec.HeaderMethod); m != "" {
		return m == "notifications/cancelled"
	}
	if req.GetBody == nil {
		return false
	}
	body, err := req.GetBody()
	if err != nil {
		return false
	}
	defer body.Close()
	b, _ := io.ReadAll(io.LimitReader(body, 4<<10))
	return bytes.Contains(b, []byte(`"notifications/cancelled"`)) && !strings.Contains(string(b), `"id"`)
}
