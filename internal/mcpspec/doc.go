// Package mcpspec holds the rules of the MCP specification that more than
// one component applies, each written once, as data and small pure
// functions: the protocol revisions and which era each is of, what
// 2026-07-28 removed, its _meta keys and HTTP header rules, the error
// codes MCP defines, the log levels, which results carry caching hints,
// and which client capability a request toward the client needs. What a
// component does about a rule (an HTTP status, a session's state) stays
// in the component.
//
//	version := mcpspec.Negotiate(p.ProtocolVersion) // what initialize answers
//	if mcpspec.Stateless(version) && slices.Contains(mcpspec.RemovedIn20260728, method) {
//		return jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "%s was removed in %s", method, version)
//	}
//	if need, ok := mcpspec.Declared(clientCaps, "elicitation/create", params); !ok {
//		return fmt.Errorf("the client did not declare %s", need)
//	}
package mcpspec
