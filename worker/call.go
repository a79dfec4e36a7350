package worker

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Result is an MCP tool result. A tool's own failure (bad arguments, a
// failed lookup) is a Result with IsError set; see Errorf.
type Result = mcp.CallToolResult

// Call is one tool call as the handler sees it.
type Call struct {
	// ID is the coordinator's call id (not the client's request id).
	ID string
	// Tool is the tool's name.
	Tool string
	// Arguments is the JSON object the client sent.
	Arguments json.RawMessage
	// Deadline is when the call times out; zero if it has none.
	Deadline time.Time

	exec      *execution
	principal string
	scopes    []string
	session   string
	logLevel  string
}

// Principal is who the gateway authenticated the caller as ("anonymous"
// without authentication). A handler never sees the caller's token.
func (c *Call) Principal() string { return c.principal }

// Scopes are the OAuth scopes the caller's token granted, as the gateway
// verified them; nil without OAuth.
func (c *Call) Scopes() []string { return c.scopes }

// Bind decodes the arguments into v.
func (c *Call) Bind(v any) error {
	if err := json.Unmarshal(c.Arguments, v); err != nil {
		return fmt.Errorf("invalid arguments for %s: %w", c.Tool, err)
	}
	return nil
}

// WantsProgress says whether the client asked for progress notifications.
func (c *Call) WantsProgress() bool { return c.exec != nil && c.exec.wantsProgress }

// Progress reports progress. total is 0 when unknown. Reports that do not
// increase progress, that the client did not ask for, or that come after
// the call was settled are dropped: progress never follows a response or
// a cancellation.
func (c *Call) Progress(progress, total float64, message string) {
	if c.exec != nil {
		c.exec.progress(progress, total, message)
	}
}

// Log sends an MCP log message (notifications/message) about the call to
// its client, while the call runs. level is an MCP level name (debug,
// info, notice, warning, error, ...); data is any JSON-encodable value.
func (c *Call) Log(level, logger string, data any) {
	if c.exec != nil {
		c.exec.log(level, logger, data)
	}
}

// Text returns a result holding one text block.
func Text(s string) *Result {
	return &Result{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// Errorf returns a tool error result: the call completes, and the client
// sees isError with the message.
func Errorf(format string, args ...any) *Result {
	r := Text(fmt.Sprintf(format, args...))
	r.IsError = true
	return r
}
