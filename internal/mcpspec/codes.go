package mcpspec

// Error codes MCP defines beside JSON-RPC's own.
const (
	// CodeResourceNotFound is resources/read's unknown URI before
	// 2026-07-28, which answers invalid params instead.
	CodeResourceNotFound = -32002
	// CodeHeaderMismatch: 2026-07-28 HTTP headers disagree with the body.
	CodeHeaderMismatch = -32020
	// CodeMissingRequiredClientCapability: the request needs a client
	// capability its client did not declare (2026-07-28).
	CodeMissingRequiredClientCapability = -32021
	// CodeUnsupportedProtocolVersion: the requested version is not served
	// (2026-07-28).
	CodeUnsupportedProtocolVersion = -32022
	// CodeURLElicitationRequired: the request cannot go on until the user
	// completes URL elicitations (2025-11-25).
	CodeURLElicitationRequired = -32042
	// CodeEventNotFound: the Events extension's NotFound, for an event
	// name no server offers.
	CodeEventNotFound = -32023
)
