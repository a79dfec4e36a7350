package gateway

import (
	"context"
	"sync"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// watchQuiet asks the coordinator about a call whose Execute stream has
// been quiet for ProbeInterval: a worker gone silent (no FIN, no RST) has
// its call failed by the janitor within the lease TTL, and an operator or
// another replica may decide a call too, but nothing on a silent stream
// says so. When the call was cancelled or failed, end stops the stream,
// and the lost-worker path settles what the client is told (an error, or
// a retry elsewhere). A completed call's result is on its way (the worker
// sends it once it learns its completion won, which may take a retry when
// a reply was lost), so it gets half an interval more; if nothing comes,
// the client is told its result was lost, while the record still says
// so. heard notes a message on the stream; completed says the gateway
// learnt the call COMPLETED otherwise (its own cancel lost to the
// completion); stop ends the watch and waits for a probe in progress.
func (c *call) watchQuiet(begun *pb.BeginResponse, end context.CancelFunc) (heard, completed, stop func()) {
	return quietWatch(c.s.g.opts.ProbeInterval, func() pb.CallState { return c.stateOf(begun.GetCallId()) }, end)
}

// quietWatch is watchQuiet's timer logic: it asks stateOf after every
// interval without a heard message (half an interval after seeing the
// call COMPLETED), and calls end as watchQuiet says. It is a timer, not a
// goroutine: a call holds no stack for it while it runs, and a probe runs
// only when the stream has been quiet.
func quietWatch(interval time.Duration, stateOf func() pb.CallState, end context.CancelFunc) (heard, completed, stop func()) {
	q := &quiet{interval: interval, stateOf: stateOf, end: end}
	q.mu.Lock()
	q.t = time.AfterFunc(interval, q.probe)
	q.mu.Unlock()
	return q.heard, q.completedWon, q.stop
}

// quiet is one call's quiet-stream watch.
type quiet struct {
	interval time.Duration
	stateOf  func() pb.CallState
	end      context.CancelFunc
	probing  sync.WaitGroup // a probe in progress, which stop waits for

	mu        sync.Mutex
	t         *time.Timer
	heardSeq  int  // messages heard; a probe that saw one arrive meanwhile is stale
	completed bool // seen COMPLETED with no message since
	// known says the gateway learnt the call COMPLETED, not from a probe,
	// when heardSeq was knownSeq.
	known    bool
	knownSeq int
	stopped  bool
}

func (q *quiet) heard() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.heardSeq++
	q.completed = false
	if !q.stopped {
		q.t.Reset(q.interval)
	}
}

// completedWon says the call COMPLETED (a cancel of the gateway's lost to
// its completion): its result gets half an interval, as after a probe
// that found it so, and then the stream ends with no probe, which a
// coordinator out of reach would answer RUNNING (seen in the fault
// harness: a result lost with its worker's link waited out the call's
// deadline and grace).
func (q *quiet) completedWon() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	q.known, q.knownSeq = true, q.heardSeq
	q.t.Reset(q.interval / 2)
}

// probe runs when the timer fires: it asks for the call's state and acts
// on it. A call found decided without its worker ends the stream; for
// one found running or completed, a message heard while it asked (heard
// has set the timer again) makes the answer stale.
func (q *quiet) probe() {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return
	}
	if q.known && q.heardSeq == q.knownSeq { // nothing came since it was learnt
		q.stopped = true
		q.mu.Unlock()
		q.end()
		return
	}
	q.probing.Add(1) // under mu, before stop can set stopped: stop's Wait sees it
	seq := q.heardSeq
	q.mu.Unlock()
	defer q.probing.Done()
	if q.ends(q.stateOf(), seq) {
		q.end()
	}
}

// ends records what a probe found and says whether the stream must end.
func (q *quiet) ends(state pb.CallState, seq int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.stopped:
		return false
	case state == pb.CallState_CALL_STATE_CANCELLED || state == pb.CallState_CALL_STATE_FAILED:
		q.stopped = true
		return true
	case q.heardSeq != seq:
		return false
	case state == pb.CallState_CALL_STATE_COMPLETED && q.completed:
		q.stopped = true
		return true // its result did not come: it was lost on the way
	case state == pb.CallState_CALL_STATE_COMPLETED:
		q.completed = true
		q.t.Reset(q.interval / 2)
	default:
		q.t.Reset(q.interval)
	}
	return false
}

// stop ends the watch and waits for a probe in progress.
func (q *quiet) stop() {
	q.mu.Lock()
	q.stopped = true
	q.t.Stop()
	q.mu.Unlock()
	q.probing.Wait()
}

// probeTimeout bounds one probe: a read takes milliseconds, and a replica
// that does not answer (paused, partitioned) must not delay the next one.
const probeTimeout = 2 * time.Second

// stateOf is the call's state at the coordinator, read with the other
// probes of the moment (probe.go); RUNNING when it cannot be asked, so the
// call runs on.
func (c *call) stateOf(callID string) pb.CallState { return c.s.g.prober.state(callID) }
