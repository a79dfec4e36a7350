package mcpspec

import "slices"

// The protocol revisions served, by version.
const (
	Version20260728 = "2026-07-28"
	Version20251125 = "2025-11-25"
	Version20250618 = "2025-06-18"
	Version20250326 = "2025-03-26"
)

// Versions2025 are the revisions of the 2025 era, newest first: a client
// opens a session with initialize, which negotiates one of them.
var Versions2025 = []string{Version20251125, Version20250618, Version20250326}

// Versions are all the revisions served, newest first. The ones not in
// Versions2025 are stateless: no initialize and no session; every
// request names its version and client capabilities in _meta.
var Versions = append([]string{Version20260728}, Versions2025...)

// Negotiate is the version an initialize answers with: the one the
// client asked for if it is of the 2025 era, else the latest of that era,
// as the lifecycle section asks.
func Negotiate(requested string) string {
	if slices.Contains(Versions2025, requested) {
		return requested
	}
	return Versions2025[0]
}

// Stateless reports whether version is a revision served without
// sessions (2026-07-28).
func Stateless(version string) bool {
	return slices.Contains(Versions, version) && !slices.Contains(Versions2025, version)
}

// RemovedIn20260728 are the requests 2026-07-28 removed: a client that
// speaks it gets method not found for them.
var RemovedIn20260728 = []string{"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}

// _meta keys of 2026-07-28 requests, results and notifications.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
	// MetaRelatedTask ties a message to its task (2025-11-25 tasks).
	MetaRelatedTask = "io.modelcontextprotocol/related-task"
)

// ExtensionTasks names the tasks extension of 2026-07-28, in the
// extensions of capabilities.
const ExtensionTasks = "io.modelcontextprotocol/tasks"

// ExtensionEvents names the Events extension (SEP-3415), defined for
// 2026-07-28 and later.
const ExtensionEvents = "io.modelcontextprotocol/events"

// Cacheable reports whether a 2026-07-28 result of method carries
// caching hints (ttlMs and cacheScope).
func Cacheable(method string) bool {
	switch method {
	case "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read", "server/discover":
		return true
	}
	return false
}
