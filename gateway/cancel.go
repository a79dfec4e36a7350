package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// cancelParams are notifications/cancelled's params.
type cancelParams struct {
	RequestID json.RawMessage `json:"requestId"`
	Reason    *string         `json:"reason"`
}

// clientCancelled handles notifications/cancelled. It is never answered.
// A cancel for a request this gateway holds flips the call's gate at once;
// one for a request read but not yet registered waits for it (arrive); one
// for a request it does not hold may name a call on another replica of the
// same session, or one that has just ended here, so it still asks the
// coordinator, in this scope only: a cancel that lost to completion is
// audited once as cancel_lost, on every transport. Malformed ones are
// ignored. The coordinator's RPC runs through async (a held call's) or
// lookup (one this gateway does not hold), so a transport's read loop need
// not wait for it.
func (s *session) clientCancelled(raw json.RawMessage, async, lookup func(func())) {
	var p cancelParams
	if err := json.Unmarshal(raw, &p); err != nil || p.RequestID == nil {
		s.g.log.Debug("ignoring malformed cancellation", "scope", s.scope)
		s.g.metrics.cancel(cancelInvalid)
		return
	}
	id, err := jsonrpc.ParseID(p.RequestID)
	if err != nil {
		s.g.log.Debug("ignoring cancellation with a bad id", "scope", s.scope, "err", err)
		s.g.metrics.cancel(cancelInvalid)
		return
	}
	if s.endListen(id) {
		return // a stdio subscriptions/listen, not a call
	}
	reason := ""
	if p.Reason != nil {
		reason = *p.Reason
	}
	s.mu.Lock()
	c := s.inbound[id.Key()]
	_, outbound := s.outbound[id.Key()]
	_, arriving := s.arriving[id.Key()]
	if c == nil && arriving {
		s.arriving[id.Key()] = &cancelOrder{who: pb.Initiator_INITIATOR_CLIENT, reason: reason}
	}
	s.mu.Unlock()
	outbound = outbound || s.isOutbound(id)
	switch {
	case c != nil:
		o, lost := c.askCancel(pb.Initiator_INITIATOR_CLIENT, reason)
		if o != nil {
			async(func() { c.sendCancel(o) })
		}
		if !lost {
			return
		} // its answer went out: the lookup below records the lost cancel
	case arriving:
		return // register hands it to the call
	case outbound:
		s.g.metrics.cancel(cancelWrongDirection) // the id of a request we sent; not the client's to cancel
		return
	}
	// Take the token before the lookup, so that concurrent cancels cannot
	// all pass the check; a lookup that finds its call gives it back.
	switch s.lookups.take(true) {
	case tokenTaken:
		lookup(func() { s.lookupCancel(id, reason) })
	case tokenAwaited:
		lookup(func() {
			if !s.lookups.await(s.g.base) {
				s.g.metrics.cancel(cancelRateLimited)
				return
			}
			s.lookupCancel(id, reason)
		})
	default:
		s.g.metrics.cancel(cancelRateLimited)
	}
}

// arrive records a request read from the client whose handling starts on
// its own goroutine, so that a cancel read after it waits for its call.
func (s *session) arrive(id jsonrpc.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.arriving == nil {
		s.arriving = map[string]*cancelOrder{}
	}
	if _, ok := s.arriving[id.Key()]; !ok {
		s.arriving[id.Key()] = nil
	}
}

// forgetArrival ends what arrive began, once the request was handled.
func (s *session) forgetArrival(id jsonrpc.ID) {
	s.mu.Lock()
	delete(s.arriving, id.Key())
	s.mu.Unlock()
}

// lookupCancel asks the coordinator to cancel a request of this scope that
// this gateway does not hold. The caller took a lookup token for it.
func (s *session) lookupCancel(id jsonrpc.ID, reason string) {
	won := false
	defer func() { s.lookups.done(won) }() // only a cancel that won was worth its lookup
	ctx, cancel := context.WithTimeout(s.g.base, cancelTimeout)
	defer cancel()
	resp, err := s.g.coord.Cancel(ctx, &pb.CancelRequest{
		Target:    &pb.CancelRequest_Key{Key: &pb.CallKey{Scope: s.scope, RequestId: requestID(id)}},
		Initiator: pb.Initiator_INITIATOR_CLIENT, Reason: reason, Principal: s.principal,
		AwaitRecord: true, // another replica may have started it a moment ago
	})
	if err != nil {
		s.g.log.Warn("cancel for a call this gateway does not hold failed", "scope", s.scope, "err", err)
		return
	}
	won = resp.GetResult() == pb.CancelResult_CANCEL_RESULT_CANCELLED
	s.g.metrics.cancel(cancelResultLabel(resp.GetResult()))
}

func cancelResultLabel(r pb.CancelResult) string {
	switch r {
	case pb.CancelResult_CANCEL_RESULT_CANCELLED:
		return cancelWon
	case pb.CancelResult_CANCEL_RESULT_UNKNOWN:
		return cancelUnknown
	default:
		return cancelLost
	}
}

// Cancels that name no call held here are looked up at the coordinator
// (the call may run on another replica). Each that turns out to name
// nothing spends a token; with none left the session's lookups stop
// until tokens refill. A flood of bogus cancels then costs the
// coordinator little and cannot crowd out other sessions' cancels, while
// cancels that find their calls are never limited: a cancel that finds
// no token while lookups are in flight waits for them, since each that
// finds its call gives its token back (sixty genuine cancels at once
// must all land, though only fifty tokens exist).
const (
	lookupRate  = 20 // per second
	lookupBurst = 50
)

// bucket is a token bucket; the zero value is full.
type bucket struct {
	tokens float64
	last   time.Time
}

// available refills the bucket to now and reports whether a token is
// there.
func (b *bucket) available(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = lookupBurst
	} else {
		b.tokens = min(lookupBurst, b.tokens+now.Sub(b.last).Seconds()*lookupRate)
	}
	b.last = now
	return b.tokens >= 1
}

// refillIn is how long until the bucket holds a token again.
func (b *bucket) refillIn() time.Duration {
	return max(time.Millisecond, time.Duration((1-b.tokens)/lookupRate*float64(time.Second)))
}

// lookupLimiter holds a session's lookup tokens and the lookups that hold
// them. The zero value is ready.
type lookupLimiter struct {
	mu      sync.Mutex
	b       bucket
	out     int           // lookups holding a token
	waiting int           // cancels waiting for one; at most lookupBurst
	ended   chan struct{} // closed, and replaced, when a lookup ends
}

type tokenGrant int

const (
	tokenRefused tokenGrant = iota // none left and none may come back: drop the cancel
	tokenTaken                     // look it up now
	tokenAwaited                   // look it up once await gives a token
)

// take takes a token or, when mayWait, a place among those waiting for
// one. Whoever is given a token calls done.
func (l *lookupLimiter) take(mayWait bool) tokenGrant {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.b.available(time.Now()):
		l.b.tokens--
		l.out++
		return tokenTaken
	case mayWait && l.out > 0 && l.waiting < lookupBurst:
		l.waiting++
		return tokenAwaited
	}
	return tokenRefused
}

// await waits for a token after take said tokenAwaited: one given back,
// or the bucket's refill. It reports false when every lookup in flight
// ended without giving one back first, or ctx ended.
func (l *lookupLimiter) await(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer func() { l.waiting-- }()
	for {
		if l.b.available(time.Now()) {
			l.b.tokens--
			l.out++
			return true
		}
		if l.out == 0 || ctx.Err() != nil {
			return false
		}
		if l.ended == nil {
			l.ended = make(chan struct{})
		}
		ended, refill := l.ended, time.NewTimer(l.b.refillIn())
		l.mu.Unlock()
		select {
		case <-ended:
		case <-refill.C:
		case <-ctx.Done():
		}
		refill.Stop()
		l.mu.Lock()
	}
}

// done ends a lookup that held a token, giving the token back when the
// lookup was worth it, and wakes the cancels waiting for one.
func (l *lookupLimiter) done(refund bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out--
	if refund {
		l.b.tokens = min(lookupBurst, l.b.tokens+1)
	}
	if l.ended != nil {
		close(l.ended)
		l.ended = nil
	}
}

// requestCancel asks for the call to be cancelled. Before Begin has
// returned it is remembered and sent once the call exists. It reports
// false when the call's answer has already gone out and no cancel was
// sent for it: this one lost, and only the coordinator can record that
// (the call stays in its session until the answer is written, so such a
// cancel can still find it here).
func (c *call) requestCancel(who pb.Initiator, reason string) bool {
	o, lost := c.askCancel(who, reason)
	if o != nil {
		c.sendCancel(o)
	}
	return !lost
}

// askCancel is the gate's askCancel; a client's cancel that did not lose
// also has the call's handler stopped (stopHandler).
func (c *call) askCancel(who pb.Initiator, reason string) (send *cancelOrder, lost bool) {
	send, lost = c.gate.askCancel(who, reason)
	if who == pb.Initiator_INITIATOR_CLIENT && !lost {
		c.stopHandler()
	}
	return send, lost
}

// sendCancel asks the coordinator; it reports whether the cancel won.
// A client's cancel has its call's handler stopped (stopHandler) beside
// the decision, not after it; this catches a call whose Execute stream
// opened after the cancel came.
func (c *call) sendCancel(o *cancelOrder) bool {
	g := c.s.g
	if o.who == pb.Initiator_INITIATOR_CLIENT {
		c.stopHandler()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.traced(g.base)), cancelTimeout)
	defer cancel()
	resp, err := g.coord.Cancel(ctx, &pb.CancelRequest{
		Target:    &pb.CancelRequest_Key{Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}},
		Initiator: o.who, Reason: o.reason, Principal: c.s.principal, ChildRequests: c.children.records(),
	})
	if err != nil {
		g.log.Warn("cancel failed", "scope", c.s.scope, "id", c.idText(), "err", err)
		c.gate.undecided()
		return false
	}
	if o.who == pb.Initiator_INITIATOR_CLIENT {
		g.metrics.cancel(cancelResultLabel(resp.GetResult()))
	}
	switch resp.GetResult() {
	case pb.CancelResult_CANCEL_RESULT_CANCELLED:
		c.cancelledBy(o.who, o.reason)
		return true
	case pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED:
		who, why := resp.GetWinnerInitiator(), resp.GetWinnerReason()
		if o.who == pb.Initiator_INITIATOR_CLIENT {
			// The client asked for the cancel and expects no answer; that
			// another cancellation got there first (its worker saw the
			// stream end, say) changes nothing for it.
			who = pb.Initiator_INITIATOR_CLIENT
		}
		c.cancelledBy(who, why)
		return true
	}
	if resp.GetResult() == pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED {
		c.completedWon()
	}
	return false // completion (or failure) won; its answer goes out
}

// completedWon notes that the call COMPLETED: its result is on its way,
// and if its stream ends or stays quiet without it, the client is told
// the result was lost, with no further decision asked for.
func (c *call) completedWon() {
	c.mu.Lock()
	c.knownCompleted = true
	completed := c.completed
	c.mu.Unlock()
	if completed != nil {
		completed()
	}
}

// stopHandler tells the worker running the call, once, that its caller
// is gone, so that the handler stops now: a client's cancel takes effect
// as its leaving does (callersGone), beside the decision and not one
// commit after it, even while the call's record is not yet durable. The
// worker keeps the Execute stream and ends the call as the decision says;
// a handler that had already returned is left alone, and its completion
// may still win. Should no decision come by decide_by (the cancel could
// not be sent), the worker cancels the call itself. Nothing is shown the
// sooner for it.
func (c *call) stopHandler() {
	c.mu.Lock()
	stop := c.stopExec != nil && !c.handlerStopped
	c.handlerStopped = c.handlerStopped || stop
	c.mu.Unlock()
	if stop {
		c.s.g.callersGone([]*call{c})
	}
}

// cancelledBy closes the call's gate after a cancellation won, answering
// the client with an error when the gate says it still waits (see
// gate.cancelled), and stops the call's Execute stream.
func (c *call) cancelledBy(who pb.Initiator, reason string) {
	if c.gate.cancelled(who, c.s.hasLeft()) {
		if who == pb.Initiator_INITIATOR_TIMEOUT {
			c.mu.Lock()
			timeout := c.timeout
			c.mu.Unlock()
			c.respond(c.failure("the call timed out after %v and was cancelled", timeout))
		} else {
			c.respond(c.failure("%s", cancelledMessage(who, reason)))
		}
	}
	c.cutExecute() // the fast path: the worker sees its caller go at once
}

// cancelledMessage tells a client who cancelled its call, when it was not
// the client.
func cancelledMessage(who pb.Initiator, reason string) string {
	var msg string
	switch who {
	case pb.Initiator_INITIATOR_OPERATOR:
		msg = "an operator cancelled the call"
	case pb.Initiator_INITIATOR_SHUTDOWN:
		msg = "the call was cancelled because the server running it shut down"
	case pb.Initiator_INITIATOR_DISCONNECT:
		msg = "the call was cancelled because its connection closed"
	case pb.Initiator_INITIATOR_WORKER_LOST:
		return workerLost
	default:
		msg = "the call was cancelled"
	}
	if reason != "" {
		msg += " (" + reason + ")"
	}
	return msg
}
