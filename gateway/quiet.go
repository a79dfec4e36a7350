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
// the client is told its result was lost, while the record still says so. heard notes a message on the
// stream; end stops the watch and waits for it.
func (c *call) watchQuiet(begun *pb.BeginResponse, end context.CancelFunc) (heard, stop func()) {
	return quietWatch(c.s.g.opts.ProbeInterval, func() pb.CallState { return c.stateOf(begun.GetCallId()) }, end)
}

// quietWatch is watchQuiet's timer logic: it asks stateOf after every
// interval without a heard message (half an interval after seeing the
// call COMPLETED), and calls end as watchQuiet says.
func quietWatch(interval time.Duration, stateOf func() pb.CallState, end context.CancelFunc) (heard, stop func()) {
	events := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(interval)
		defer t.Stop()
		completed := false // seen COMPLETED with no message since
		for {
			select {
			case <-done:
				return
			case <-events:
				completed = false
				t.Reset(interval)
			case <-t.C:
				switch stateOf() {
				case pb.CallState_CALL_STATE_CANCELLED, pb.CallState_CALL_STATE_FAILED:
					end()
					return
				case pb.CallState_CALL_STATE_COMPLETED:
					if completed {
						end() // its result did not come: it was lost on the way
						return
					}
					completed = true
					t.Reset(interval / 2)
					continue
				}
				t.Reset(interval)
			}
		}
	})
	heard = func() {
		select {
		case events <- struct{}{}:
		default:
		}
	}
	return heard, func() { close(done); wg.Wait() }
}

// probeTimeout bounds one probe: a read takes milliseconds, and a replica
// that does not answer (paused, partitioned) must not delay the next one.
const probeTimeout = 2 * time.Second

// stateOf is the call's state at the coordinator; RUNNING when it cannot
// be asked, so the call runs on.
func (c *call) stateOf(callID string) pb.CallState {
	g := c.s.g
	ctx, cancel := context.WithTimeout(g.base, probeTimeout)
	defer cancel()
	got, err := g.coord.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: callID}})
	if err != nil {
		return pb.CallState_CALL_STATE_RUNNING
	}
	return got.GetCall().GetState()
}
