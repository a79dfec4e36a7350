// Package clientcmd holds the client commands of the mcpcancel binary:
// call (one tool over MCP, with progress, Ctrl-C as a cancellation and
// the call's audit after), calls (the calls in flight, --watch to
// follow them), audit (list and tail), cancel (an operator's cancel),
// tools, and console (the web console, a client of the
// coordinator's API). They speak only the API (api/, api/client) and
// MCP; none imports a component's server package. cmd/mcpcancel lists
// them beside the commands that run the components.
package clientcmd
