package coordinator

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// completeOnStream settles a completion a worker sent on its control
// stream, as the Complete RPC does, and answers on the stream. It settles
// apart from the stream's receiver, so that one commit holds up none of
// the worker's other messages; the server owns that goroutine, and a
// stream that ends first loses only the answer, which the worker asks
// for again.
func (s *Server) completeOnStream(ctx context.Context, a *attachment, m *pb.CompleteCall) {
	if w := m.GetRequest().GetCall().GetWorker(); w != a.worker {
		// The stream speaks for one worker; the RPC would check the
		// reference against the record, and so does this, but a worker
		// names no other's calls on its own stream.
		a.replyComplete(m.GetSeq(), nil, toStatus(fmt.Errorf("%w: %q completes on %q's stream", ErrNotOwner, w, a.worker)))
		return
	}
	s.metrics.streamCompletes.Inc()
	if !s.bg.Go(func() {
		ctx, span := completeSpan(ctx, m.GetTraceContext())
		defer span.End()
		r, err := s.Complete(ctx, m.GetRequest())
		a.replyComplete(m.GetSeq(), r, err)
	}) {
		a.replyComplete(m.GetSeq(), nil, toStatus(errStopping))
	}
}

// replyComplete answers the completion seq with r, or with err as the RPC
// would have returned it.
func (a *attachment) replyComplete(seq uint64, r *pb.CompleteResponse, err error) {
	reply := &pb.CompleteReply{Seq: seq, Response: r}
	if err != nil {
		st := status.Convert(err)
		reply.ErrorCode, reply.ErrorMessage, reply.Response = int32(st.Code()), st.Message(), nil
	}
	a.send(&pb.AttachResponse{Msg: &pb.AttachResponse_Completed{Completed: reply}})
}

// completeSpan is the span a completion on the stream is decided in,
// named as the Complete RPC's, under the worker's trace context; with
// tracing off, a no-op span.
func completeSpan(ctx context.Context, carrier map[string]string) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	// Not under the control stream's own span: without the worker's
	// trace context the span is a root, as the RPC's would be.
	ctx = telemetry.Propagator().Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), propagation.MapCarrier(carrier))
	return telemetry.Tracer("github.com/mcpcancel/mcpcancel/coordinator").Start(ctx, pb.CoordinatorService_Complete_FullMethodName[1:],
		trace.WithSpanKind(trace.SpanKindServer))
}
