package demo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestSleep(t *testing.T) {
	for _, tc := range []struct {
		args, want string
		took       time.Duration
	}{
		{`{"seconds":2}`, "slept 2s", 2 * time.Second},
		{`{"seconds":0.5,"steps":4}`, "slept 0.5s", 500 * time.Millisecond},
		{`{"seconds":3,"steps":7}`, "slept 3s", 3 * time.Second},
		{`{"seconds":86400,"steps":10000}`, "slept 86400s", 24 * time.Hour},
		{`{"seconds":0}`, "slept 0s", 0},
	} {
		t.Run(tc.args, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				r, err := run(t.Context(), "sleep", tc.args)
				if got := text(t, r, err); got != tc.want {
					t.Errorf("sleep = %q, want %q", got, tc.want)
				}
				if took := time.Since(start); took != tc.took {
					t.Errorf("slept %v, want %v", took, tc.took)
				}
			})
		})
	}
}

// TestSleepStopsAtOnce checks that sleep returns the moment its context is
// done, wherever it is in its steps: in fake time no delay is allowed.
func TestSleepStopsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    string
		stopAt  time.Duration // when the context ends
		timeout bool          // by deadline rather than cancel
		want    error
		steps   string
	}{
		{"cancelled mid-step", `{"seconds":60}`, 7 * time.Second, false, context.Canceled, "after 1 of 10 steps"},
		{"deadline mid-step", `{"seconds":60}`, 15 * time.Second, true, context.DeadlineExceeded, "after 2 of 10 steps"},
		{"cancelled before start", `{"seconds":60}`, 0, false, context.Canceled, "after 0 of 10 steps"},
		{"zero sleep cancelled", `{"seconds":0}`, 0, false, context.Canceled, "after 0 of 10 steps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := stopAfter(t, tc.stopAt, tc.timeout)
				start := time.Now()
				r, err := run(ctx, "sleep", tc.args)
				if r != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.steps) {
					t.Fatalf("sleep = %v, %v; want no result and %v %s", r, err, tc.want, tc.steps)
				}
				if took := time.Since(start); took != tc.stopAt {
					t.Errorf("returned after %v, want %v", took, tc.stopAt)
				}
			})
		})
	}
}

// stopAfter returns a context that ends after d: by its deadline, or by a
// cancel from a timer. d == 0 means it is done already.
func stopAfter(t *testing.T, d time.Duration, deadline bool) context.Context {
	if deadline {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		t.Cleanup(cancel)
		return ctx
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	if d == 0 {
		cancel()
		return ctx
	}
	timer := time.AfterFunc(d, cancel)
	t.Cleanup(func() { timer.Stop() })
	return ctx
}
