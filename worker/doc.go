// Package worker is the runtime a tool author embeds to run MCP tools,
// resources, prompts and completions on a worker fleet behind mcpcancel.
// Register tools with Handle (and resources, templates, prompts and
// completions with HandleResource, HandleResourceTemplate, HandlePrompt
// and HandleCompletion), then Run: the
// worker serves Execute to gateways, attaches to a coordinator (any
// replica, reconnecting as needed), and settles each call there before a
// result leaves it. A handler's context is cancelled the moment its call is
// cancelled, wherever the cancellation came from.
//
// Files, one per feature: worker.go (options, registration, Run), execute.go (running a
// call: admission, the handler, progress, stop orders), settle.go
// (settling and finishing a call once its handler returns), control.go
// (the control stream to the coordinator), call.go (what a handler sees),
// offers.go and invoke.go (resources, prompts, completions), command.go.
package worker
