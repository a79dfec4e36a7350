// Package backoff is mcpcancel's one retry delay: exponential from Min
// to Max, each delay jittered by ±20% (as grpc-go's connection backoff
// is), so that the peers that saw the same failure do not retry in step.
// Every retry loop in the tree waits through it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter is how far, as a fraction, a delay strays either way.
const Jitter = 0.2

// Backoff hands out the delays of one retry loop. Set Min and Max (a zero
// Max means Min: a fixed, jittered delay); the zero state starts at Min.
// A Backoff is not safe for concurrent use: each loop has its own.
type Backoff struct {
	Min, Max time.Duration

	next time.Duration // the unjittered delay Next hands out; 0 means Min
}

// Next returns the delay before the next retry, and doubles the one after
// it, up to Max.
func (b *Backoff) Next() time.Duration {
	d := b.next
	if d == 0 {
		d = b.Min
	}
	b.next = min(2*d, max(b.Max, b.Min))
	return jitter(d)
}

// Reset starts the delays at Min again, as after a success.
func (b *Backoff) Reset() { b.next = 0 }

// Wait waits Next, or until ctx is done, when it returns ctx.Err().
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Sleep waits d, or until ctx is done, when it returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter returns d moved by up to Jitter of itself, either way.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 + Jitter*(2*rand.Float64()-1)))
}
