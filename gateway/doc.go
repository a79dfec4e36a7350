// Package gateway is the MCP side of mcpcancel: it speaks MCP to clients
// over stdio and Streamable HTTP (the 2025 revisions, with sessions, and
// the stateless 2026-07-28 revision), runs their tool calls on workers, and
// turns every MCP cancellation into a coordinator decision. It owns its
// JSON-RPC dispatch so that nothing answers a request whose cancellation
// won: every request passes through a gate that lets exactly one of its
// response or its cancellation out, and progress only before either.
//
// Files, one per feature: gate.go (the gate, which carries the
// invariants), call.go (Begin, retry and the relay of a call's Execute
// stream), quiet.go (the quiet-stream probe), http.go, httpsession.go,
// sse.go and server.go (Streamable HTTP routing, sessions, SSE, the mux),
// modern.go and modernheaders.go (2026-07-28 and its header checks),
// stdio.go, session.go and outbox.go (a client stream's writer), and
// auth*.go, oauth.go and jwt.go. It talks to the coordinator only through
// the generated API and api/client: neither the coordinator package nor
// etcd is among its dependencies.
package gateway
