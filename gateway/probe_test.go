package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// The quiet-stream probes of many silent calls go out together: 40 calls
// that send nothing for several probe intervals are read in batches of
// GetCallStates, not one GetCall per call per interval; and calls decided
// without the gateway (an operator's cancel) still end.
func TestQuietProbesAreBatched(t *testing.T) {
	st := newStack(t, stackOptions{})
	var batches, ids, singles atomic.Int64
	conn, err := grpc.NewClient(st.coord.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			switch {
			case strings.HasSuffix(method, "/GetCallStates"):
				batches.Add(1)
				ids.Add(int64(len(req.(*pb.GetCallStatesRequest).GetCallIds())))
			case strings.HasSuffix(method, "/GetCall"):
				singles.Add(1)
			}
			return invoke(ctx, method, req, reply, cc, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	const interval = 200 * time.Millisecond
	_, url := testcluster.StartGateway(t, conn, gateway.Options{Name: "gw-probe", ProbeInterval: interval})
	sid := openSession(t, url)
	const n = 40
	var calls []<-chan streamResult
	for i := range n {
		calls = append(calls, startCall(t, url, sid, i+1, "sleep", map[string]any{"seconds": 30}, nil))
	}
	waitFor(t, "every call to run", func() bool { return workerInFlight(st)() == n })
	waitFor(t, "the probes of five intervals", func() bool { return ids.Load() >= 5*n })
	t.Logf("%d ids probed in %d GetCallStates; %d GetCall", ids.Load(), batches.Load(), singles.Load())
	if singles.Load() != 0 {
		t.Fatalf("%d probes went one by one", singles.Load())
	}
	// The calls started within a few tens of milliseconds, and so do
	// their probes each interval; a probe that comes while a batch is out
	// joins the next. Two to a batch at the least (four, here).
	if 2*batches.Load() > ids.Load() {
		t.Fatalf("%d ids in %d batches: not batched", ids.Load(), batches.Load())
	}
	if _, err := st.c.CancelScope(t.Context(), &pb.CancelScopeRequest{Scope: "session:" + sid, Initiator: pb.Initiator_INITIATOR_OPERATOR}); err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		select {
		case r := <-c:
			if len(r.msgs) == 0 || !strings.Contains(strings.ToLower(fmt.Sprint(r.msgs)), "operator") {
				t.Fatalf("call %d ended with %v, want the operator's cancellation", i+1, r.msgs)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("call %d did not end after the operator cancelled it", i+1)
		}
	}
}
