package demo

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcpcancel/mcpcancel/worker"
)

var echoTool = worker.Tool{
	Name:        "echo",
	Title:       "Echo",
	Description: "Returns the given text unchanged.",
	InputSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "text": {"type": "string", "description": "The text to return."}
  },
  "required": ["text"],
  "additionalProperties": false
}`),
	// Running it again changes nothing: a call lost with its worker may
	// be retried on another.
	Idempotent: true,
}

type echoArgs struct {
	Text *string `json:"text"`
}

func echo(_ context.Context, c *worker.Call) (*worker.Result, error) {
	var a echoArgs
	if err := bind(c, &a); err != nil {
		return toolError(c.Tool, err), nil
	}
	if a.Text == nil {
		return toolError(c.Tool, fmt.Errorf("%w: text is required", errArgs)), nil
	}
	return worker.Text(*a.Text), nil
}
