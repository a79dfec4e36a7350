package auth

import (
	"testing"
	"time"
)

// A bucket refills at its rate, a refusal spends nothing and says when
// to retry, and idle (full) buckets are swept once the map is big.
func TestLimiterRefillsAndSweeps(t *testing.T) {
	now := time.Unix(1e9, 0)
	ls := NewLimiter(RateLimit{Rate: 0.5, Burst: 2}) // a token every 2s
	ls.now = func() time.Time { return now }
	allow := ls.Allow
	for i := range 2 {
		if ok, _ := allow("alice"); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	for range 3 {
		if ok, retry := allow("alice"); ok || retry != 2*time.Second {
			t.Fatalf("past the burst: allowed %v, retry after %v", ok, retry)
		}
	}
	now = now.Add(2 * time.Second)
	if ok, _ := allow("alice"); !ok {
		t.Fatal("refused after a token refilled (refusals must not spend)")
	}
	if ok, _ := allow("bob"); !ok {
		t.Fatal("bob shares alice's bucket")
	}
	now = now.Add(time.Hour) // every bucket is full again
	for i := range maxLimiters {
		allow(time.Duration(i).String())
	}
	if n := len(ls.by); n > maxLimiters {
		t.Fatalf("%d buckets kept, more than %d", n, maxLimiters)
	}
	if NewLimiter(RateLimit{}) != nil {
		t.Fatal("a zero rate limits")
	}
}
