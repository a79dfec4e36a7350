// Package demo holds the demo tools that `mcpcancel dev` and
// `mcpcancel worker --demo` serve: sleep (slow, with progress), echo
// (instant) and spin (CPU-bound). They exist to show and to test
// cancellation, progress and throughput end to end; their names,
// arguments and results are part of the user-facing contract.
package demo

import (
	"errors"
	"fmt"
	"math"

	"github.com/mcpcancel/mcpcancel/worker"
)

// Bounds on the demo tools' arguments.
const (
	maxSleepSeconds = 86400
	maxSleepSteps   = 10000
	defaultSteps    = 10
	maxSpinMillis   = 600000
)

// errArgs marks an argument the tool rejects; the call then completes
// with a tool error result, not a failure.
var errArgs = errors.New("invalid arguments")

// Register adds the demo tools sleep, echo and spin to w.
func Register(w *worker.Worker) {
	w.Handle(sleepTool, sleep)
	w.Handle(echoTool, echo)
	w.Handle(spinTool, spin)
}

// bind decodes c's arguments strictly into v: unknown fields are an
// error, as the schemas forbid them.
func bind(c *worker.Call, v any) error {
	err := c.BindStrict(v)
	if ae := (*worker.ArgumentsError)(nil); errors.As(err, &ae) {
		return fmt.Errorf("%w: %v", errArgs, ae.Err)
	}
	return err
}

// inRange checks a number argument against [lo, hi].
func inRange(name string, v, lo, hi float64) error {
	if math.IsNaN(v) || v < lo || v > hi {
		return fmt.Errorf("%w: %s must be between %g and %g, not %g", errArgs, name, lo, hi, v)
	}
	return nil
}

// integer checks an integer argument against [lo, hi]. JSON Schema counts
// 3.0 and 3e2 as integers, so the value arrives as a float.
func integer(name string, v float64, lo, hi int) (int, error) {
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("%w: %s must be an integer, not %g", errArgs, name, v)
	}
	if err := inRange(name, v, float64(lo), float64(hi)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// toolError turns a rejected argument into the result the client sees.
func toolError(tool string, err error) *worker.Result {
	return worker.Errorf("%s: %v", tool, err)
}
