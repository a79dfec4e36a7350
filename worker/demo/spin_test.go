package demo

import (
	"context"
	"errors"
	"testing"
	"time"
)

// spin burns real CPU and reads the real clock, so these tests run in real
// time (a synctest bubble's clock stands still while a goroutine is busy).

func TestSpin(t *testing.T) {
	start := time.Now()
	r, err := run(t.Context(), "spin", `{"millis":30}`)
	if got := text(t, r, err); got != "spun 30ms" {
		t.Errorf("spin = %q, want %q", got, "spun 30ms")
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("spun only %v", took)
	}
}

// TestStopsPromptly checks, in real time, that a cancelled or timed-out
// call to a long sleep or spin returns soon after its context is done.
func TestStopsPromptly(t *testing.T) {
	const grace = 500 * time.Millisecond // generous: -race and busy CI machines
	for _, tc := range []struct {
		name, tool, args string
		deadline         bool
	}{
		{"sleep cancelled", "sleep", `{"seconds":3600,"steps":1}`, false},
		{"sleep timed out", "sleep", `{"seconds":3600}`, true},
		{"spin cancelled", "spin", `{"millis":600000}`, false},
		{"spin timed out", "spin", `{"millis":600000}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := stopAfter(t, 20*time.Millisecond, tc.deadline)
			doneAt := make(chan time.Time, 1)
			context.AfterFunc(ctx, func() { doneAt <- time.Now() })
			r, err := run(ctx, tc.tool, tc.args)
			late := time.Since(<-doneAt)
			if r != nil || err == nil || !errors.Is(err, ctx.Err()) {
				t.Fatalf("%s = %v, %v; want no result and %v", tc.tool, r, err, ctx.Err())
			}
			if late > grace {
				t.Errorf("%s returned %v after its context was done", tc.tool, late)
			}
		})
	}
}
