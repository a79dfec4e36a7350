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
// says so. When the call is no longer running, end stops the stream, and
// the lost-worker path settles what the client is told (an error, the
// result's loss, or a retry elsewhere). heard notes a message on the
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
				if !c.stillRunning(begun.GetCallId()) {
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

// stillRunning says whether the coordinator has the call running; when it
// cannot be asked, the call is taken to run on.
func (c *call) stillRunning(callID string) bool {
	g := c.s.g
	ctx, cancel := context.WithTimeout(g.base, cancelTimeout)
	defer cancel()
	got, err := g.coord.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: callID}})
	return err != nil || got.GetCall().GetState() == pb.CallState_CALL_STATE_RUNNING
}
