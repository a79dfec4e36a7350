package gateway

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// codeRateLimited is the JSON-RPC error code of a request refused by a
// rate limit (in the implementation-defined server error range).
const codeRateLimited = -32029

// RateLimit is a token bucket per principal: Rate a second, bursts of
// Burst (default: Rate rounded up, at least 1). A zero Rate does not limit.
type RateLimit struct {
	Rate  float64
	Burst int
}

// limiters holds one bucket per principal. Buckets are dropped once full
// again (idle), so the map holds only the principals that spent tokens
// recently; the map is swept when it grows past maxLimiters.
type limiters struct {
	every rate.Limit
	burst int
	now   func() time.Time

	mu sync.Mutex
	by map[string]*rate.Limiter
}

// maxLimiters is the map size past which idle buckets are swept.
const maxLimiters = 10000

// newLimiters returns nil, which allows everything, for a zero rate.
func newLimiters(l RateLimit) *limiters {
	if l.Rate <= 0 {
		return nil
	}
	if l.Burst <= 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate)))
	}
	return &limiters{every: rate.Limit(l.Rate), burst: l.Burst, now: time.Now, by: map[string]*rate.Limiter{}}
}

// allow spends a token of principal's bucket. When none is left it sets
// Retry-After on w (whole seconds, rounded up) and reports false.
func (ls *limiters) allow(w http.ResponseWriter, principal string) bool {
	if ls == nil {
		return true
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
	if delay <= 0 {
		return true
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(delay.Seconds()))))
	return false
}

// sweepLocked drops the buckets that are full again, once the map is big.
func (ls *limiters) sweepLocked(now time.Time) {
	if len(ls.by) < maxLimiters {
		return
	}
	for p, l := range ls.by {
		if l.TokensAt(now) >= float64(ls.burst) {
			delete(ls.by, p)
		}
	}
}
