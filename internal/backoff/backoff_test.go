package backoff_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/backoff"
)

// within says whether d is base moved by at most the jitter.
func within(d, base time.Duration) bool {
	lo := time.Duration(float64(base) * (1 - backoff.Jitter))
	hi := time.Duration(float64(base) * (1 + backoff.Jitter))
	return d >= lo && d <= hi
}

// Delays double from Min to Max, each within the jitter, and Reset starts
// them at Min again; a zero Max is a fixed delay.
func TestNext(t *testing.T) {
	b := &backoff.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if d := b.Next(); !within(d, w*time.Millisecond) {
			t.Fatalf("delay %d = %v, want %vms ±%.0f%%", i, d, w, 100*backoff.Jitter)
		}
	}
	b.Reset()
	if d := b.Next(); !within(d, 100*time.Millisecond) {
		t.Fatalf("after Reset: %v", d)
	}
	fixed := &backoff.Backoff{Min: 50 * time.Millisecond}
	for range 5 {
		if d := fixed.Next(); !within(d, 50*time.Millisecond) {
			t.Fatalf("fixed delay %v", d)
		}
	}
}

// The jitter spreads delays: many loops do not all wait the same.
func TestJitterSpreads(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 100 {
		b := &backoff.Backoff{Min: time.Second}
		seen[b.Next()] = true
	}
	if len(seen) < 50 {
		t.Fatalf("100 first delays took only %d values", len(seen))
	}
}

// Wait sleeps the delay on the (fake) clock, and ends early, with ctx's
// error, when ctx is done.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backoff.Backoff{Min: time.Second, Max: 4 * time.Second}
		for _, w := range []time.Duration{1, 2, 4} {
			before := time.Now()
			if err := b.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(before); !within(d, w*time.Second) {
				t.Fatalf("waited %v, want %vs ±jitter", d, w)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		before := time.Now()
		if err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past ctx = %v", err)
		}
		if d := time.Since(before); d != 500*time.Millisecond {
			t.Fatalf("Wait outlived ctx: %v", d)
		}
	})
}
