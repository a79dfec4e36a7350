package gateway

import (
	"sync"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// gateState is where a call's gate stands.
type gateState int

// A gate leaves running (or cancelling) exactly once: to answered when its
// one response is queued, or to cancelled when the client's own
// cancellation won, after which nothing goes out. From the moment the
// gateway decides to ask for a cancel the call is cancelling: no more
// progress, logs or requests toward the client, though a result or error
// that wins the race still goes out.
const (
	running gateState = iota
	cancelling
	answered
	cancelled
)

// cancelOrder is a cancellation to ask the coordinator for.
type cancelOrder struct {
	who    pb.Initiator
	reason string
}

// gate is the promise a routed request makes its client: exactly one of
// its response or its client's own cancellation goes out, and progress,
// logs and requests toward the client only before either. It decides; it
// never does I/O. What it lets out goes to a sink, which only queues.
type gate struct {
	mu        sync.Mutex
	state     gateState
	pending   *cancelOrder // asked for and not yet decided
	begun     bool         // the coordinator knows the call: a cancel may be sent
	ownCancel bool         // the client asked to cancel (its notification, or closing its stream)
	relayed   bool         // something of the call reached the client
	outcome   string       // for metrics, set by whoever closes the gate
}

// openLocked says whether the gate still lets a response out.
func (g *gate) openLocked() bool { return g.state == running || g.state == cancelling }

// askCancel records a request to cancel. It returns the order to send now
// (nil when there is none: another is pending, the call has not begun, or
// the gate has closed), and whether the call's response went out before
// any cancel was asked for: then this cancel lost, and only the
// coordinator can record that.
func (g *gate) askCancel(who pb.Initiator, reason string) (send *cancelOrder, lost bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if who == pb.Initiator_INITIATOR_CLIENT {
		g.ownCancel = true
	}
	if g.state != running || g.pending != nil {
		return nil, g.state == answered && g.pending == nil // with a cancel pending, the coordinator has heard one
	}
	o := &cancelOrder{who: who, reason: reason}
	g.pending, g.state = o, cancelling
	if !g.begun {
		return nil, false // begin hands it over
	}
	return o, false
}

// begin records that the coordinator knows the call, and returns the
// cancel asked for before it did, to send now.
func (g *gate) begin() *cancelOrder {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.begun = true
	return g.pending
}

// undecided reopens the gate when a cancel could not be decided (the
// coordinator was unreachable): a later cancel may try again, and the call
// runs on as before.
func (g *gate) undecided() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending = nil
	if g.state == cancelling {
		g.state = running
	}
}

// clientAsked says whether the client asked to cancel the call.
func (g *gate) clientAsked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ownCancel
}

// cancelled closes the gate on a cancellation that won. Only the client's
// own cancellation is silent: the client asked for nothing, and gets
// nothing. So is one whose initiator is unknown (answering after the
// client's accepted cancel would break the one rule that cannot be mended
// later), and any once the client asked to cancel or left (clientLeft:
// stdio EOF, DELETE). Anyone else's (a timeout, a disconnect, a drained
// worker, an operator) must be answered with an error naming it, because
// the client is still waiting: cancelled then reports true, leaving the
// gate open for that one response.
func (g *gate) cancelled(who pb.Initiator, clientLeft bool) (answer bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.openLocked() {
		return false
	}
	if g.ownCancel || clientLeft || who == pb.Initiator_INITIATOR_CLIENT || who == pb.Initiator_INITIATOR_UNSPECIFIED {
		g.state, g.outcome = cancelled, outcomeCancelled
		return false
	}
	if g.outcome == "" {
		g.outcome = outcomeCancelled
		if who == pb.Initiator_INITIATOR_TIMEOUT {
			g.outcome = outcomeTimeout
		}
	}
	return true
}

// respond queues the call's one response on out, if the gate is still
// open; it reports whether it did.
func (g *gate) respond(out sink, msg []byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.openLocked() {
		return false
	}
	g.state = answered
	out.send(msg)
	return true
}

// relay lets something of the running call out (progress, a log, a
// request toward the client) with send, which queues it; it reports
// whether send did. Nothing goes out once a cancel is asked for or the
// gate has closed.
func (g *gate) relay(send func() bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != running || !send() {
		return false
	}
	g.relayed = true
	return true
}

// setOutcome records how the call ended, first writer wins, while the
// gate is still open (the outcome belongs to whoever closes it).
func (g *gate) setOutcome(o string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.openLocked() && g.outcome == "" {
		g.outcome = o
	}
}

// ended is the outcome recorded, "" for none.
func (g *gate) ended() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.outcome
}

// settled says whether the gate has closed.
func (g *gate) settled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.openLocked()
}

// replace readies the gate for the call to be placed once more after its
// worker was lost, if nothing of it reached the client and nobody asked to
// cancel it; until the new call begins, a cancel waits. It reports
// whether it did.
func (g *gate) replace() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.relayed || g.state != running || g.pending != nil {
		return false
	}
	g.begun, g.outcome = false, ""
	return true
}
