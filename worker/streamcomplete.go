package worker

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// completeCall records a call's completion: as a message on the control
// stream when its replica takes it there, which spares an RPC per call,
// else as the Complete RPC. Either is idempotent, so settle retries a
// completion whose answer was lost (the stream ended first) either way.
func (c *control) completeCall(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	c.mu.Lock()
	if c.stream == nil || !c.completesOnStream || c.detaching {
		c.mu.Unlock()
		return c.w.coord.Complete(ctx, req)
	}
	c.completeSeq++
	seq := c.completeSeq
	answer := make(chan *pb.CompleteReply, 1)
	c.completing[seq] = answer
	c.outbox = append(c.outbox, &pb.AttachRequest{Msg: &pb.AttachRequest_Complete{Complete: &pb.CompleteCall{
		Seq: seq, Request: req, TraceContext: telemetry.Carrier(ctx),
	}}})
	c.mu.Unlock()
	c.signal()
	select {
	case r, ok := <-answer:
		switch {
		case !ok:
			return nil, status.Error(codes.Unavailable, "the control stream ended before the completion was answered")
		case r.GetErrorCode() != 0:
			return nil, status.Error(codes.Code(r.GetErrorCode()), r.GetErrorMessage())
		}
		return r.GetResponse(), nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.completing, seq)
		c.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// completed hands a completion's answer to its caller, if it still waits.
func (c *control) completed(r *pb.CompleteReply) {
	c.mu.Lock()
	answer := c.completing[r.GetSeq()]
	delete(c.completing, r.GetSeq())
	c.mu.Unlock()
	if answer != nil {
		answer <- r // buffered; the only send
	}
}

// unansweredLocked releases every completion still waiting on a stream
// that ended: each is retried, on the next stream or as the RPC.
func (c *control) unansweredLocked() {
	for seq, answer := range c.completing {
		close(answer)
		delete(c.completing, seq)
	}
}
