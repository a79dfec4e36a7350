package coordinator_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// holdComplete is a client interceptor that holds every Complete, as a
// coordinator that never answers would, until release is closed, and then
// fails it with a code settle does not retry: the worker gives up on it.
// (With asOlderCoordinator: the worker's Completes are RPCs.)
func holdComplete(held chan<- struct{}, release <-chan struct{}) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !strings.HasSuffix(m, "/Complete") {
			return invoke(ctx, m, req, reply, cc, opts...)
		}
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
		return status.Error(codes.Internal, "the test gave up on this Complete")
	})
}

// Regression (issue 14; owner keys leaked in a lost_complete_reply run,
// seed 1796123160633683670): a call decided by someone else while its
// worker was settling it kept its stop order for good when the settle
// never got through. The worker ignored the order (its handler had
// returned), and the settle, which would have reported the stop, gave up.
// The order is now answered with the stop at once, so the owner key goes
// while the Complete is still stuck.
func TestStopOrderWhileSettlingClearsOwnerKey(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	co := testcluster.StartCoordinator(t, cli, coordinator.Options{Name: "a"})
	held, release := make(chan struct{}, 1), make(chan struct{})
	giveUp := sync.OnceFunc(func() { close(release) })
	hold := newHoldTool(false)
	w := testcluster.StartWorker(t, worker.Options{
		Coordinator: co.Addr, Name: "stuck", DialOptions: []grpc.DialOption{asOlderCoordinator(), holdComplete(held, release)},
	}, hold.register)
	t.Cleanup(giveUp) // before the worker stops: its settle waits on it
	c := co.Client(t)
	waitTools(t, c, "hold")
	k := key("conn:stuck", num(1))
	b, err := c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "hold", Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.Client(t).Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.CallId, Fence: b.Fence, Tool: "hold", ArgumentsJson: []byte(`{}`), Deadline: b.Deadline, Worker: b.Worker,
	})
	if err != nil {
		t.Fatal(err)
	}
	hold.next(t).release <- worker.Text("late")
	<-held // the worker is settling; its Complete gets no answer
	r, err := c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_OPERATOR, Reason: "stop"})
	if err != nil || r.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v, %v; want CANCELLED", r, err)
	}
	ownerKey := prefix + "owners/stuck/" + b.CallId
	testcluster.WaitFor(t, "the stop order to be cleared while the Complete is stuck", func() bool {
		resp, err := cli.Get(t.Context(), ownerKey, clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
	giveUp()
	if _, err := (&execStream{stream: s}).stream.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("execute stream after the settle gave up: %v, want Internal", err)
	}
	if got := outcomes(auditsFrom(t, cli)[b.CallId]); len(got) != 1 || got[0] != "cancelled" {
		t.Fatalf("audit = %v, want [cancelled]", got)
	}
}
