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

// Call is one call as its handler sees it: a tool call, or a request for
// a resource, a prompt or a completion.
type Call struct {
	// ID is the coordinator's call id (not the client's request id).
	ID string
	// Method is the MCP method (MethodToolsCall, MethodResourcesRead, ...).
	Method string
	// Tool is the call's target: the tool's name, the resource's URI, the
	// prompt's name, or a completion's reference (RefPrompt or RefResource
	// and a name or URI).
	Tool string
	// Arguments is the JSON object the client sent: a tool's arguments,
	// or a prompt's; {} for other methods.
	Arguments json.RawMessage
	// Params is the request's MCP params (without _meta) for methods
	// other than tools/call, such as mcp.CompleteParams.
	Params json.RawMessage
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

// URI is a resource call's URI (resources/read, subscribe, unsubscribe).
func (c *Call) URI() string {
	if c.Method == MethodResourcesRead || c.Method == MethodResourcesSubscribe || c.Method == MethodResourcesUnsubscribe {
		return c.Tool
	}
	return ""
}

// Bind decodes the arguments into v. An argument of the wrong type is an
// *ArgumentsError in the words of the tool's schema: "invalid arguments
// for sleep: seconds: want a number, got a string".
func (c *Call) Bind(v any) error {
	if err := json.Unmarshal(c.Arguments, v); err != nil {
		return &ArgumentsError{Tool: c.Tool, Err: argsError(err)}
	}
	return nil
}

// BindParams decodes the request's params (methods other than
// tools/call) into v, such as an *mcp.CompleteParams.
func (c *Call) BindParams(v any) error {
	if err := json.Unmarshal(c.Params, v); err != nil {
		return fmt.Errorf("invalid params for %s: %w", c.describe(), err)
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
