package coordinator

import (
	"sync"
	"time"
)

// A call begun beside its work costs two commits, its Begin and its
// decision, and when its handler is quicker than a commit its decision
// waits for the Begin: the call's latency is two commits, not the
// handler plus one (DESIGN section 4). So the Begin of a quick tool's
// call lingers, at most one commit's time, for the call's decision. A
// decision that comes meanwhile writes the record itself, already
// settled (createTxn), and the Begin, which then finds it, writes
// nothing: one commit for the call. A Begin lingers only for a target
// whose calls lately ended within a commit's time, and then twice their
// typical time, at most a commit: a call that runs longer pays for it
// only if it ends before its Begin's commit would have, by at most the
// linger. Under load a target's calls take longer than a commit and no
// Begin lingers; the group commit shares commits instead.

// quickness tracks the replica's commit time and each target's time
// from placement to completion, as exponentially weighted means.
type quickness struct {
	mu      sync.Mutex
	commit  ewma
	targets map[string]*ewma
}

// maxQuickTargets bounds the targets tracked; past it new ones are not.
const maxQuickTargets = 4096

// minQuickSamples is how many observations a mean needs to be used.
const minQuickSamples = 8

type ewma struct {
	mean float64
	n    int
}

func (e *ewma) add(x float64) {
	if e.n == 0 {
		e.mean = x
	} else {
		e.mean += 0.2 * (x - e.mean)
	}
	e.n++
}

// committed observes a Txn's time in etcd.
func (q *quickness) committed(d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.commit.add(float64(d))
}

// completed observes a call of target completed d after it was placed.
func (q *quickness) completed(target string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.targets[target]
	if e == nil {
		if len(q.targets) >= maxQuickTargets {
			return
		}
		if q.targets == nil {
			q.targets = map[string]*ewma{}
		}
		e = &ewma{}
		q.targets[target] = e
	}
	e.add(float64(d))
}

// linger is how long a Begin of target's call waits for its decision.
func (q *quickness) linger(target string) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.targets[target]
	if t == nil || t.n < minQuickSamples || q.commit.n < minQuickSamples || t.mean >= q.commit.mean {
		return 0
	}
	return time.Duration(min(2*t.mean, q.commit.mean))
}

// lingerFor is how long the Begin of rec lingers (Options.BeginLinger).
func (s *Server) lingerFor(rec *callRecord) time.Duration {
	switch l := s.opts.BeginLinger; {
	case l > 0:
		return l
	case l < 0:
		return 0
	}
	return s.quick.linger(quickTarget(rec))
}

// quickTarget names a call's target for quickness.
func quickTarget(rec *callRecord) string { return rec.Method + " " + rec.Tool }

// claimFirst lets a decision that arrives while the call's Begin
// lingers write the record first. It returns the func that ends the
// claim, once the decision tried its write, saying whether the write
// created the record; or nil if the Begin has gone to etcd or another
// decision holds the claim: then the decision waits for the Begin.
func (b *placedBegin) claimFirst() func(created bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent || b.claim != nil {
		return nil
	}
	b.claim = make(chan struct{})
	close(b.claimed)
	var once sync.Once
	return func(created bool) {
		once.Do(func() {
			b.mu.Lock()
			b.created = created
			b.mu.Unlock()
			close(b.claim)
		})
	}
}

// linger holds the Begin back for up to d, or until a decision claims
// the call; then, if one did, until it tried its write, for at most
// bound (a backstop: every claiming decision tries promptly). It reports
// whether the claiming decision created the call's record, settled: the
// Begin would find it and write nothing, so it need not go to etcd.
func (b *placedBegin) linger(d, bound time.Duration) (settled bool) {
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-b.claimed:
		}
		t.Stop()
	}
	b.mu.Lock()
	b.sent = true
	claim := b.claim
	b.mu.Unlock()
	if claim == nil {
		return false
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-claim:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.created
	case <-t.C:
		return false
	}
}
