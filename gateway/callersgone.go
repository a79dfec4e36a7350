package gateway

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// callersGoneTimeout bounds one CallersGone notice to a worker.
const callersGoneTimeout = 2 * time.Second

// maxCallersGone is the most call ids one notice names (the worker's
// limit).
const maxCallersGone = 10000

// callersGone tells the workers running cs that their callers are gone
// and that this gateway's cancellation of them is on its way, so that
// their handlers stop now rather than as each decision commits. It does
// not wait: each worker's notice goes on a goroutine the gateway's Close
// waits for, so a silent worker holds up only its own notice. A notice
// that does not arrive changes nothing but when the handlers stop.
func (g *Gateway) callersGone(cs []*call) {
	byWorker := map[string][]string{}
	for _, c := range cs {
		c.mu.Lock()
		begun := c.begun
		c.mu.Unlock()
		if begun != nil {
			addr := begun.GetWorkerAddress()
			byWorker[addr] = append(byWorker[addr], begun.GetCallId())
		}
	}
	// The worker waits for the decisions as long as the cancels can take:
	// the scope's, then each call's own.
	decideBy := timestamppb.New(time.Now().Add(2 * cancelTimeout))
	for addr, ids := range byWorker {
		for len(ids) > 0 {
			n := min(len(ids), maxCallersGone)
			g.noticeGone(addr, &pb.CallersGoneRequest{CallIds: ids[:n], DecideBy: decideBy})
			ids = ids[n:]
		}
	}
}

// noticeGone sends one CallersGone on a goroutine that g.gone owns; a
// closed gateway sends none.
func (g *Gateway) noticeGone(addr string, req *pb.CallersGoneRequest) {
	wc, err := g.workerClient(addr) // the connection the calls' streams run on
	if err != nil {
		return // closed: the calls' streams end with it
	}
	g.spawn(&g.gone, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(g.base), callersGoneTimeout)
		defer cancel()
		if _, err := wc.CallersGone(ctx, req); err != nil {
			g.log.Debug("telling a worker its callers are gone", "worker", addr, "err", err)
		}
	})
}
