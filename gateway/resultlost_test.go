package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// A call that COMPLETED but whose result never reaches the gateway, while
// the coordinators cannot answer its quiet-stream probes: the call's own
// timeout cancel loses to the completion, which tells the gateway the
// call COMPLETED, and the client is told its result was lost half a probe
// interval later, not after the call's deadline and grace (seen in the
// fault harness: a worker's link died before it learnt its completion
// won, and one coordinator was paused; the client waited 15 s).
func TestCompletedCallWhoseResultIsLostIsAnsweredSoon(t *testing.T) {
	st := newStack(t, stackOptions{})
	_, url := testcluster.StartGateway(t, probesUnanswered{st.conn}, gateway.Options{
		Name: "gw-lost", CallTimeout: time.Second, ProbeInterval: time.Second, ExecuteGrace: time.Minute,
		WorkerDialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(dropResults)},
	})
	sid := openSession(t, url)
	start := time.Now()
	call := startCall(t, url, sid, 1, "sleep", map[string]any{"seconds": 0.2}, nil)
	var r streamResult
	select {
	case r = <-call:
	case <-time.After(20 * time.Second):
		t.Fatal("no answer within 20 s; the stream's bound is a minute past the deadline")
	}
	t.Logf("answered after %v: %v", time.Since(start), r.msgs)
	if !strings.Contains(fmt.Sprint(r.msgs), "result was lost") {
		t.Fatalf("the client got %v, want: its result was lost", r.msgs)
	}
	as := st.audits(t, "session:"+sid)["1"]
	var outcomes []string
	for _, a := range as {
		outcomes = append(outcomes, a.Outcome+"/"+a.Initiator)
	}
	if len(as) != 2 || as[0].Outcome != "completed" || as[1].Outcome != "cancel_lost" || as[1].Initiator != "timeout" {
		t.Fatalf("decisions %v, want the completion and the timeout's lost cancel", outcomes)
	}
}

// probesUnanswered is a coordinator link on which quiet-stream probes get
// no answer (the replica they reach is paused), and everything else goes
// through.
type probesUnanswered struct{ grpc.ClientConnInterface }

func (c probesUnanswered) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/GetCallStates") || strings.HasSuffix(method, "/GetCall") {
		<-ctx.Done()
		return ctx.Err()
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// dropResults loses every Execute result on its way to the gateway: the
// stream goes quiet instead, as one on a link gone silent does.
func dropResults(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return resultless{ClientStream: s, ctx: ctx}, nil
}

type resultless struct {
	grpc.ClientStream
	ctx context.Context
}

func (s resultless) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if r, ok := m.(*pb.ExecuteResponse); ok && r.GetResult() != nil {
		<-s.ctx.Done()
		return s.ctx.Err()
	}
	return nil
}
