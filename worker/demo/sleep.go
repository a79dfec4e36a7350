package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
)

var sleepTool = worker.Tool{
	Name:  "sleep",
	Title: "Sleep",
	Description: "Sleeps for the given number of seconds in equal steps, " +
		"reporting progress after each step and stopping at once when the call is cancelled. " +
		"Returns \"slept <seconds>s\".",
	InputSchema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "seconds": {"type": "number", "minimum": 0, "maximum": 86400, "description": "How long to sleep, in seconds."},
    "steps": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 10, "description": "How many equal steps to sleep in; one progress notification per step."}
  },
  "required": ["seconds"],
  "additionalProperties": false
}`),
	// Running it again changes nothing: a call lost with its worker may
	// be retried on another.
	Idempotent: true,
}

type sleepArgs struct {
	Seconds *float64 `json:"seconds"`
	Steps   *float64 `json:"steps"`
}

// sleepPlan is a validated sleep.
type sleepPlan struct {
	seconds float64
	steps   int
}

func (a sleepArgs) plan() (sleepPlan, error) {
	if a.Seconds == nil {
		return sleepPlan{}, fmt.Errorf("%w: seconds is required", errArgs)
	}
	p := sleepPlan{seconds: *a.Seconds, steps: defaultSteps}
	if err := inRange("seconds", p.seconds, 0, maxSleepSeconds); err != nil {
		return sleepPlan{}, err
	}
	if a.Steps != nil {
		var err error
		if p.steps, err = integer("steps", *a.Steps, 1, maxSleepSteps); err != nil {
			return sleepPlan{}, err
		}
	}
	return p, nil
}

// sleep sleeps in steps, one progress report per step. Step i ends at
// start + i/steps of the total, so late wake-ups do not add up.
func sleep(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	var a sleepArgs
	if err := bind(c, &a); err != nil {
		return toolError(c.Tool, err), nil
	}
	p, err := a.plan()
	if err != nil {
		return toolError(c.Tool, err), nil
	}
	total := time.Duration(p.seconds * float64(time.Second))
	start := time.Now()
	for i := 1; i <= p.steps; i++ {
		end := start.Add(time.Duration(float64(total) * float64(i) / float64(p.steps)))
		if err := sleepUntil(ctx, end); err != nil {
			return nil, fmt.Errorf("sleep stopped after %d of %d steps: %w", i-1, p.steps, err)
		}
		c.Progress(float64(i), float64(p.steps), fmt.Sprintf("slept step %d of %d", i, p.steps))
	}
	return worker.Text(fmt.Sprintf("slept %gs", p.seconds)), nil
}

// sleepUntil waits for t or for ctx, whichever is first; a done ctx wins
// even when t has passed.
func sleepUntil(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
