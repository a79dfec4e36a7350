package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
)

var spinTool = worker.Tool{
	Name:  "spin",
	Title: "Spin",
	Description: "Keeps one CPU busy for the given number of milliseconds, " +
		"checking for cancellation all the while. Returns \"spun <millis>ms\".",
	InputSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "millis": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "How long to spin, in milliseconds."}
  },
  "required": ["millis"],
  "additionalProperties": false
}`),
}

type spinArgs struct {
	Millis *float64 `json:"millis"`
}

func (a spinArgs) duration() (int, error) {
	if a.Millis == nil {
		return 0, fmt.Errorf("%w: millis is required", errArgs)
	}
	return integer("millis", *a.Millis, 0, maxSpinMillis)
}

func spin(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	var a spinArgs
	if err := bind(c, &a); err != nil {
		return toolError(c.Tool, err), nil
	}
	millis, err := a.duration()
	if err != nil {
		return toolError(c.Tool, err), nil
	}
	if err := busy(ctx, time.Duration(millis)*time.Millisecond); err != nil {
		return nil, fmt.Errorf("spin stopped: %w", err)
	}
	return worker.Text(fmt.Sprintf("spun %dms", millis)), nil
}

// busy burns CPU for d. Each turn of the loop reads the clock and checks
// ctx, so a cancellation is seen within microseconds.
func busy(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !time.Now().Before(end) {
			return nil
		}
	}
}
