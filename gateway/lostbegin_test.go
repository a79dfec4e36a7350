package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// Regression (found by the robustness soak): Begin committed, its reply
// was lost, and the client was told the call could not start; the call
// stayed RUNNING until its session closed, which then recorded it
// CANCELLED: a response on the wire for a cancelled call. The gateway
// now fails such a call before it answers. A call started beside its
// Begin (Start) has two replies to lose: the placement, after which the
// gateway abandons the Begin as it would a Begin's; and the word that
// the record is written, after which it reads the record and, finding it,
// runs the call on (TestLostBegunReplyReadsTheRecord).
func TestLostBeginReplyEndsFailed(t *testing.T) {
	for _, lose := range []string{"begin", "placed"} {
		t.Run(lose, func(t *testing.T) { lostBeginReply(t, lose) })
	}
}

// The word that a call's record is written was lost: the gateway reads
// the record, finds it, and the call runs on to its result, its record
// completed (and nothing of it was shown before: the hold waits for the
// read).
func TestLostBegunReplyReadsTheRecord(t *testing.T) {
	st, url := lossyGateway(t, "begun")
	sid := openSession(t, url)
	// A call still running when the reply is lost: failing it by its
	// placement would win, and the client would get an error.
	r := <-startCall(t, url, sid, 1, "sleep", map[string]any{"seconds": 1, "steps": 4}, nil)
	if last := r.msgs[len(r.msgs)-1]; !strings.Contains(fmt.Sprint(last["result"]), "slept") {
		t.Fatalf("messages = %v, want the sleep's result", r.msgs)
	}
	waitFor(t, "the call's record", func() bool { return len(st.audits(t, "session:"+sid)["1"]) > 0 })
	if as := st.audits(t, "session:"+sid)["1"]; len(as) != 1 || as[0].Outcome != "completed" {
		t.Fatalf("audit = %+v, want one completed", as)
	}
}

func lostBeginReply(t *testing.T, lose string) {
	st, url := lossyGateway(t, lose)
	sid := openSession(t, url)
	lostBeginEnds(t, st, url, sid, lose)
}

// lossyGateway is a gateway whose coordinator link loses one reply, as
// lose names: Begin's, or Start's placement or Begun.
func lossyGateway(t *testing.T, lose string) (*stack, string) {
	t.Helper()
	st := newStack(t, stackOptions{})
	var dropped atomic.Bool
	lost := status.Error(codes.Unavailable, "error reading from server: EOF") // committed, reply lost
	conn, err := grpc.NewClient(st.coord.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoke(ctx, method, req, reply, cc, opts...)
			if err == nil && lose == "begin" && strings.HasSuffix(method, "/Begin") && dropped.CompareAndSwap(false, true) {
				return lost
			}
			return err
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if lose == "begin" && strings.HasSuffix(method, "/Start") {
				return nil, status.Error(codes.Unimplemented, "a coordinator without Start") // the gateway falls back to Begin
			}
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || !strings.HasSuffix(method, "/Start") {
				return cs, err
			}
			return &losingStream{ClientStream: cs, lose: lose, dropped: &dropped, err: lost}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_, url := testcluster.StartGateway(t, conn, gateway.Options{Name: "gw-lost"})
	return st, url
}

func lostBeginEnds(t *testing.T, st *stack, url, sid, lose string) {
	r := <-startCall(t, url, sid, 1, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	if len(r.msgs) != 1 || r.msgs[0]["error"] == nil {
		t.Fatalf("messages = %v, want the error that the call could not start", r.msgs)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	as := st.audits(t, "session:"+sid)["1"]
	if lose == "placed" && len(as) == 0 {
		return // the abandonment reached etcd before the Begin: never begun, nothing ran
	}
	if len(as) != 1 || as[0].Outcome != "failed" {
		t.Fatalf("audit = %+v, want one failed record: the client was told the call could not start", as)
	}
	waitFor(t, "the worker to stop the call", func() bool {
		resp, err := st.c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 0
	})
}

// losingStream loses one reply of a Start: the placement, or the Begun
// that follows it.
type losingStream struct {
	grpc.ClientStream
	lose    string
	dropped *atomic.Bool
	err     error
}

func (s *losingStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	r := m.(*pb.StartResponse)
	if (s.lose == "placed" && r.GetPlaced() != nil || s.lose == "begun" && r.GetBegun() != nil) && s.dropped.CompareAndSwap(false, true) {
		return s.err
	}
	return nil
}
