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
// a retry elsewhere). heard notes a message on the
// stream; end stops the watch and waits for it.
func (c *call) watchQuiet(begun *pb.BeginResponse, end context.CancelFunc) (heard, stop func()) {
	g := c.s.g
	events := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(g.opts.ProbeInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-events:
				t.Reset(g.opts.ProbeInterval)
			case <-t.C:
				if c.endedWithoutResult(begun.GetCallId()) {
					end()
					return
				}
				t.Reset(g.opts.ProbeInterval)
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

// endedWithoutResult says whether the coordinator has the call cancelled or
// failed. A completed call's result is on its way: the worker sends it
// once it learns its completion won, which may take it a few retries when
// a reply was lost, so the stream stays open for it (its deadline still
// bounds it). When the coordinator cannot be asked, the call runs on.
func (c *call) endedWithoutResult(callID string) bool {
	g := c.s.g
	ctx, cancel := context.WithTimeout(g.base, probeTimeout)
	defer cancel()
	got, err := g.coord.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: callID}})
	if err != nil {
		return false
	}
	st := got.GetCall().GetState()
	return st == pb.CallState_CALL_STATE_CANCELLED || st == pb.CallState_CALL_STATE_FAILED
}
