package coordinator_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// asOlderCoordinator makes a worker's replicas look like ones from before
// completions on the control stream: the worker completes with the RPC.
func asOlderCoordinator() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		return &recvHook{ClientStream: s, hook: func(m *pb.AttachResponse) error {
			if att := m.GetAttached(); att != nil {
				att.CompletesOnStream = false
			}
			return nil
		}}, err
	})
}

// cutAtFirstCompletion ends a worker's control stream as the answer to its
// first completion arrives, as a link cut right after the commit would.
func cutAtFirstCompletion(cut *atomic.Bool) grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		return &recvHook{ClientStream: s, hook: func(m *pb.AttachResponse) error {
			if m.GetCompleted() != nil && cut.CompareAndSwap(false, true) {
				return status.Error(codes.Unavailable, "error reading from server: EOF")
			}
			return nil
		}}, err
	})
}

// recvHook runs hook on each control-stream message a worker receives.
type recvHook struct {
	grpc.ClientStream
	hook func(*pb.AttachResponse) error
}

func (r *recvHook) RecvMsg(m any) error {
	if err := r.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if am, ok := m.(*pb.AttachResponse); ok {
		return r.hook(am)
	}
	return nil
}

// A worker completes its calls on its control stream, not with an RPC
// per call, and the coordinator counts them.
func TestCompleteOnTheControlStream(t *testing.T) {
	e := newEnv(t, envOptions{})
	reg := e.coords[0].Server.Registry()
	before := testcluster.Counter(t, reg, "mcpcancel_coordinator_stream_completions_total")
	b := e.begin(t, e.c, key("conn:stream", num(1)), "hold")
	s := e.execute(t, b, "hold", `{}`)
	e.hold.next(t).release <- worker.Text("kept")
	final := s.final(t)
	if final.GetResult() == nil || !strings.Contains(string(final.GetResult().GetResultJson()), "kept") {
		t.Fatalf("final event = %v, want the result", final)
	}
	if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 || got[0] != "completed" {
		t.Fatalf("audit = %v, want [completed]", got)
	}
	if got := testcluster.Counter(t, reg, "mcpcancel_coordinator_stream_completions_total") - before; got != 1 {
		t.Fatalf("completions on the stream = %v, want 1", got)
	}
	if got := testcluster.HandledRPCs(t, reg)["Complete"]; got != 0 {
		t.Fatalf("Complete RPCs = %v, want 0", got)
	}
}

// Regression (issue 14): a Complete whose answer was lost after it
// committed was retried, got ALREADY_COMPLETED, and the worker sent a
// Cancelled event: the audit said completed, the client never got its
// result. The retry is now recognised as won and the result goes out. The
// answer is lost on the control stream (the stream ends) or, with a
// replica that takes no completions there, as the RPC's reply.
func TestCompleteReplyLostAfterCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(*atomic.Bool) []grpc.DialOption
	}{
		{"stream", func(lost *atomic.Bool) []grpc.DialOption { return []grpc.DialOption{cutAtFirstCompletion(lost)} }},
		{"rpc", func(lost *atomic.Bool) []grpc.DialOption {
			return []grpc.DialOption{asOlderCoordinator(), dropFirstReply("Complete", lost)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			var lost atomic.Bool
			w := testcluster.StartWorker(t, worker.Options{
				Coordinator: e.coords[0].Addr, Name: "lossy", DialOptions: tc.opts(&lost),
			}, func(w *worker.Worker) { w.Handle(worker.Tool{Name: "say"}, echoText) })
			waitTools(t, e.c, "say")
			b := e.begin(t, e.c, key("conn:lost-complete", num(1)), "say")
			s, err := w.Client(t).Execute(t.Context(), &pb.ExecuteRequest{
				CallId: b.CallId, Fence: b.Fence, Tool: "say", ArgumentsJson: []byte(`{"text":"kept"}`), Deadline: b.Deadline, Worker: b.Worker,
			})
			if err != nil {
				t.Fatal(err)
			}
			final := (&execStream{stream: s}).final(t)
			if !lost.Load() {
				t.Fatal("no Complete answer was lost")
			}
			if final.GetResult() == nil || !strings.Contains(string(final.GetResult().GetResultJson()), "kept") {
				t.Fatalf("final event = %v, want the result", final)
			}
			if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 || got[0] != "completed" {
				t.Fatalf("audit = %v, want [completed]", got)
			}
		})
	}
}

// A completion on a worker's stream is checked as the RPC is: it must
// name the stream's own worker and the call's fence. Each bad one is
// answered with its error and changes nothing; the good one wins, once.
func TestCompleteOnTheStreamChecksTheCall(t *testing.T) {
	e := newEnv(t, envOptions{})
	stream, err := e.c.Attach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hello := &pb.WorkerHello{Name: "raw", Address: "127.0.0.1:1", Tools: []*pb.Tool{{Name: "rawtool"}}}
	if err := stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !first.GetAttached().GetCompletesOnStream() {
		t.Fatalf("attached = %v, want completes_on_stream", first.GetAttached())
	}
	waitTools(t, e.c, "rawtool")
	b := e.begin(t, e.c, key("conn:raw", num(1)), "rawtool")
	ref := &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: "raw"}
	complete := func(seq uint64, ref *pb.CallRef) *pb.CompleteReply {
		t.Helper()
		m := &pb.CompleteCall{Seq: seq, Request: &pb.CompleteRequest{Call: ref}}
		if err := stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Complete{Complete: m}}); err != nil {
			t.Fatal(err)
		}
		for {
			r, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if c := r.GetCompleted(); c != nil {
				if c.GetSeq() != seq {
					t.Fatalf("answer to completion %d, want %d", c.GetSeq(), seq)
				}
				return c
			}
		}
	}
	if b.Worker != "raw" {
		t.Fatalf("the call was placed on %q, not the test's worker", b.Worker)
	}
	for i, bad := range []struct {
		ref  *pb.CallRef
		want string
	}{
		{&pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: "w1"}, "completes on"}, // another worker's name
		{&pb.CallRef{CallId: b.CallId, Fence: b.Fence + 1, Worker: "raw"}, "fence"},
		{&pb.CallRef{CallId: "not-an-id", Fence: b.Fence, Worker: "raw"}, "32 hex"},
	} {
		r := complete(uint64(i+1), bad.ref)
		if r.GetResponse() != nil || codes.Code(r.GetErrorCode()) == codes.OK || !strings.Contains(r.GetErrorMessage(), bad.want) {
			t.Fatalf("completion %d (%v) = %v, want an error naming %q", i+1, bad.ref, r, bad.want)
		}
	}
	if got := e.audits(t, b.CallId); len(got) != 0 {
		t.Fatalf("audit after the bad completions = %v, want none", outcomes(got))
	}
	if r := complete(10, ref); r.GetErrorCode() != 0 || r.GetResponse().GetResult() != pb.SettleResult_SETTLE_RESULT_WON {
		t.Fatalf("completion = %v, want WON", r)
	}
	// Sent again, as after a lost answer: recognised as the one that won.
	if r := complete(11, ref); r.GetErrorCode() != 0 || r.GetResponse().GetResult() != pb.SettleResult_SETTLE_RESULT_WON {
		t.Fatalf("the completion again = %v, want WON", r)
	}
	if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 || got[0] != "completed" {
		t.Fatalf("audit = %v, want [completed]", got)
	}
}
