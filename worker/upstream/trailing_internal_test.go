package upstream

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
)

// awaitTrailing holds a result while progress trails it: not at all when
// the progress reached its total or none was asked for, trailingQuiet
// after the last progress otherwise, and never past trailingMax.
func TestAwaitTrailing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token string
		sends []time.Duration // when progress i+1 arrives, after the result
		total float64
		want  time.Duration
	}{
		{"no progress asked", "", nil, 0, 0},
		{"none trails", "t", nil, 3, trailingQuiet},
		{"trails to its total", "t", []time.Duration{10 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}, 3, 80 * time.Millisecond},
		{"trails with no total", "t", []time.Duration{10 * time.Millisecond, 40 * time.Millisecond}, 0, 40*time.Millisecond + trailingQuiet},
		{"a gap ends it", "t", []time.Duration{10 * time.Millisecond, 10*time.Millisecond + 2*trailingQuiet}, 2, 10*time.Millisecond + trailingQuiet},
		{"bounded", "t", every(trailingQuiet/2, 100), 0, trailingMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := &relay{token: tc.token, ctx: t.Context(), call: &worker.Call{}, moved: make(chan struct{})}
				start := time.Now()
				sent := make(chan struct{})
				go func() { // owned: waited for below
					defer close(sent)
					for i, at := range tc.sends {
						time.Sleep(at - time.Since(start))
						r.send(float64(i+1), tc.total, "")
					}
				}()
				r.awaitTrailing(context.Background())
				got := time.Since(start)
				<-sent
				if got != tc.want {
					t.Fatalf("held the result %v; want %v", got, tc.want)
				}
			})
		})
	}
}

// every is n instants period apart, from period on.
func every(period time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * period
	}
	return out
}
