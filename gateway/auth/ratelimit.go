package auth

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit is a token bucket per principal: Rate a second, bursts of
// Burst (default: Rate rounded up, at least 1). A zero Rate does not limit.
type RateLimit struct {
	Rate  float64
	Burst int
}

// setDefaults fills in the default of a zero (or negative) Burst.
func (l *RateLimit) setDefaults() {
	if l.Burst <= 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate)))
	}
}

// Limiter holds one token bucket per principal. Buckets are dropped
// once full again (idle), so the map holds only the principals that
// spent tokens recently; the map is swept when it grows past
// maxLimiters.
type Limiter struct {
	every rate.Limit
	burst int
	now   func() time.Time

	mu sync.Mutex
	by map[string]*rate.Limiter
}

// maxLimiters is the map size past which idle buckets are swept.
const maxLimiters = 10000

// NewLimiter returns a Limiter of l's rate for each principal, or nil,
// which allows everything, for a zero rate.
func NewLimiter(l RateLimit) *Limiter {
	if l.Rate <= 0 {
		return nil
	}
	l.setDefaults()
	return &Limiter{every: rate.Limit(l.Rate), burst: l.Burst, now: time.Now, by: map[string]*rate.Limiter{}}
}

// Allow spends a token of principal's bucket. When none is left it
// spends nothing, reports false, and says how long until one is.
func (ls *Limiter) Allow(principal string) (ok bool, retryAfter time.Duration) {
	if ls == nil {
		return true, 0
	}
	now := ls.now()
	ls.mu.Lock()
	l := ls.by[principal]
	if l == nil {
		ls.sweepLocked(now)
		l = rate.NewLimiter(ls.every, ls.burst)
		ls.by[principal] = l
	}
	r := l.ReserveN(now, 1)
	delay := r.DelayFrom(now)
	if delay > 0 {
		r.CancelAt(now) // refused: the token is not spent
	}
	ls.mu.Unlock()
	return delay <= 0, max(delay, 0)
}

// sweepLocked drops the buckets that are full again, once the map is big.
func (ls *Limiter) sweepLocked(now time.Time) {
	if len(ls.by) < maxLimiters {
		return
	}
	for p, l := range ls.by {
		if l.TokensAt(now) >= float64(ls.burst) {
			delete(ls.by, p)
		}
	}
}
