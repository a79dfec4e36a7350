package client

import "strings"

// IsSessionScope says whether scope is a client session's: a 2025-era
// HTTP session or a stdio connection (not a 2026-07-28 request).
func IsSessionScope(scope string) bool {
	return strings.HasPrefix(scope, SessionScope) || strings.HasPrefix(scope, ConnScope)
}

// sessionRequestPrefix starts the JSON-RPC id of every request a worker
// sends a client session outside any call (Worker.AskSession). The id
// names the worker, so the replica that receives the client's answer
// knows where to take it, and a token the worker chose, which it alone
// can match.
const sessionRequestPrefix = "mcpcancel-session."

// SessionRequestID is the id of worker's session request token. token is
// hex without dots.
func SessionRequestID(worker, token string) string {
	return sessionRequestPrefix + token + "." + worker
}

// ParseSessionRequestID returns the worker and token a session request id
// names.
func ParseSessionRequestID(id string) (worker, token string, ok bool) {
	rest, ok := strings.CutPrefix(id, sessionRequestPrefix)
	if !ok {
		return "", "", false
	}
	token, worker, ok = strings.Cut(rest, ".")
	if !ok || token == "" || worker == "" {
		return "", "", false
	}
	return worker, token, true
}
