package upstream

import (
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A result goes to the worker as the revision-neutral part of what the
// server answered. What 2026-07-28 adds around a complete result
// (resultType, a resources/read's caching hints ttlMs and cacheScope,
// and the server's own serverInfo in _meta) describes the adapter's
// session with the server, not the client's with the gateway: the
// gateway adds its own for a client that speaks that revision, and a
// 2025-era client must see none of it (the SDK's result types encode
// ttlMs and cacheScope always). Everything else, _meta included, passes
// whole.

// toolResult is r without the revision's envelope.
func toolResult(r *mcp.CallToolResult) *mcp.CallToolResult {
	return &mcp.CallToolResult{Meta: ownMeta(r.Meta), Content: r.Content, StructuredContent: r.StructuredContent, IsError: r.IsError}
}

// readResult is a resources/read result without the caching hints, which
// the SDK's type always encodes.
type readResult struct {
	Meta     mcp.Meta                `json:"_meta,omitempty"`
	Contents []*mcp.ResourceContents `json:"contents"`
}

// neutral is a result of forward without the revision's envelope.
func neutral(res any) any {
	switch r := res.(type) {
	case *mcp.ReadResourceResult:
		return &readResult{Meta: ownMeta(r.Meta), Contents: r.Contents}
	case *mcp.GetPromptResult:
		return &mcp.GetPromptResult{Meta: ownMeta(r.Meta), Description: r.Description, Messages: r.Messages}
	case *mcp.CompleteResult:
		return &mcp.CompleteResult{Meta: ownMeta(r.Meta), Completion: r.Completion}
	}
	return res
}

// ownMeta is a result's _meta without the server's serverInfo.
func ownMeta(m mcp.Meta) mcp.Meta {
	if _, ok := m[mcp.MetaKeyServerInfo]; !ok {
		return m
	}
	m = maps.Clone(m)
	delete(m, mcp.MetaKeyServerInfo)
	if len(m) == 0 {
		return nil
	}
	return m
}
