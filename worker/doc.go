// Package worker is the runtime a tool author embeds to run MCP tools,
// resources, prompts and completions on a worker fleet behind mcpcancel.
// Register tools with Handle (and resources, templates, prompts and
// completions with HandleResource, HandleResourceTemplate, HandlePrompt
// and HandleCompletion), then Run: the worker serves gateways, attaches
// to a coordinator (any replica, reconnecting as needed), and settles
// each call there before a result leaves it.
//
// The rules a handler can rely on: its context is cancelled the moment
// its call is cancelled, wherever the cancellation came from (a client,
// a timeout, an operator, a lost gateway); progress it sends is lossy
// (a slow client sees the latest value) but what it sent before its
// result reaches the client before the result; and a result it returns
// after its call was cancelled is dropped.
//
//	w := worker.New(worker.Options{Coordinator: "coordinator:7070", Name: "w1"})
//	w.Handle(worker.Tool{Name: "echo"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
//		var a struct{ Text string }
//		if err := c.Bind(&a); err != nil {
//			return worker.Errorf("%v", err), nil
//		}
//		return worker.Text(a.Text), nil
//	})
//	err := w.Run(ctx, listener) // serves Execute on listener until ctx ends
package worker
