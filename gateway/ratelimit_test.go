package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
)

// rateLimited says whether an answer is the rate limit's: 429, a
// Retry-After of whole seconds, and a JSON-RPC error for the request.
func rateLimited(resp *http.Response, body []byte, id int) bool {
	var m struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode == http.StatusTooManyRequests && err == nil && secs > 0 &&
		json.Unmarshal(body, &m) == nil && m.ID == id && m.Error.Code == -32029 && m.Error.Message != ""
}

// Each principal has its own budget of new sessions (each an etcd
// write) and of requests: past it, 429 with Retry-After and a JSON-RPC
// error; another principal is unaffected; and a cancellation is never
// refused, whatever the budget.
func TestRateLimitsPerPrincipal(t *testing.T) {
	const slow = 1e-6 // a second: nothing refills during the test
	st := newStack(t, stackOptions{gw: gateway.Options{
		Authenticator: tokensAuth(t, "tok-a alice\ntok-b bob\n"),
		Auth: &gateway.AuthOptions{
			Sessions: auth.RateLimit{Rate: slow, Burst: 2},
			Requests: auth.RateLimit{Rate: slow, Burst: 4},
		},
	}})
	url := st.urls[0]
	var sids []string
	for range 2 {
		resp, _ := authedPost(t, url, "tok-a", "", initBody)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("alice's initialize within the budget: %d", resp.StatusCode)
		}
		sids = append(sids, resp.Header.Get("Mcp-Session-Id"))
	}
	if resp, body := authedPost(t, url, "tok-a", "", initBody); !rateLimited(resp, body, 0) {
		t.Fatalf("alice's third initialize: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, _ := authedPost(t, url, "tok-b", "", initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's initialize: %d", resp.StatusCode)
	}

	// alice spent 2 of her 4 requests on initialize (the refused one
	// took none: the session budget is checked first).
	ping := `{"jsonrpc":"2.0","id":7,"method":"ping"}`
	for range 2 {
		if resp, body := authedPost(t, url, "tok-a", sids[0], ping); resp.StatusCode != http.StatusOK {
			t.Fatalf("alice's ping within the budget: %d %s", resp.StatusCode, body)
		}
	}
	if resp, body := authedPost(t, url, "tok-a", sids[0], ping); !rateLimited(resp, body, 7) {
		t.Fatalf("alice's request past the budget: %d %s", resp.StatusCode, body)
	}
	for i := range 20 {
		if resp, body := authedPost(t, url, "tok-a", sids[0], cancelMsg(i, "mine")); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("alice's cancel %d past the budget: %d %s", i, resp.StatusCode, body)
		}
	}
}
