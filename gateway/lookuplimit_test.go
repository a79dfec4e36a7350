package gateway

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// A cancel that finds no token while lookups are in flight waits for one
// to be given back, and is refused only when every lookup ended without
// giving one and the bucket has not refilled.
func TestLookupLimiterWaitsForRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l lookupLimiter
		for i := range lookupBurst {
			if got := l.take(true); got != tokenTaken {
				t.Fatalf("take %d = %v, want a token", i, got)
			}
		}
		if got := l.take(false); got != tokenRefused {
			t.Fatalf("a take that may not wait = %v, want refused", got)
		}
		if got := l.take(true); got != tokenAwaited {
			t.Fatalf("take past the burst = %v, want a wait", got)
		}
		got := make(chan bool)
		go func() { got <- l.await(t.Context()) }() // owned: the test reads its result
		synctest.Wait()
		select {
		case ok := <-got:
			t.Fatalf("await returned %v before any lookup ended", ok)
		default:
		}
		l.done(true) // a lookup that found its call gives its token back
		if !<-got {
			t.Fatal("the refunded token did not reach the waiting cancel")
		}

		// Every lookup ends without a refund: the waiting cancel is refused
		// at once, not after its bound.
		if l.take(true) != tokenAwaited {
			t.Fatal("want a wait")
		}
		go func() { got <- l.await(t.Context()) }() // owned: the test reads its result
		synctest.Wait()
		start := time.Now()
		for range lookupBurst {
			l.done(false)
		}
		if <-got {
			t.Fatal("a cancel got a token nobody gave back")
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("the refusal waited %v", waited)
		}
		if l.out != 0 || l.waiting != 0 {
			t.Fatalf("out %d, waiting %d after every lookup ended", l.out, l.waiting)
		}

		// With nothing in flight there is nothing to wait for; the bucket
		// refills with time.
		if l.take(true) != tokenRefused {
			t.Fatal("a take with no lookup in flight waited")
		}
		<-time.After(time.Second / lookupRate) // the refill's deadline, on synctest's clock
		if l.take(true) != tokenTaken {
			t.Fatal("the bucket did not refill")
		}
		l.done(false)
	})
}

// A waiting cancel takes the bucket's refill when no lookup gives a
// token back first, and gives up when its gateway stops.
func TestLookupLimiterWaitTakesRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l lookupLimiter
		for range lookupBurst {
			l.take(true)
		}
		if l.take(true) != tokenAwaited {
			t.Fatal("want a wait")
		}
		start := time.Now()
		if !l.await(t.Context()) {
			t.Fatal("the refill did not reach the waiting cancel")
		}
		if waited, want := time.Since(start), time.Second/lookupRate; waited != want {
			t.Fatalf("waited %v for the refill, want %v", waited, want)
		}
		ctx, stop := context.WithCancel(context.Background())
		if l.take(true) != tokenAwaited {
			t.Fatal("want a wait")
		}
		go stop() // owned: returns at once
		if l.await(ctx) {
			t.Fatal("a stopped gateway's cancel got a token")
		}
		if l.waiting != 0 {
			t.Fatalf("%d still waiting", l.waiting)
		}
	})
}
