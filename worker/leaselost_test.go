//go:build unix

package worker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
)

// TestLeaseLossSettlesTheCall is a regression test for a call left
// RUNNING forever (found by test/robustness): when the worker re-attached
// under a new lease it stopped every running call with a local FAILED
// order and told the gateway "failed" without telling the coordinator.
// A call begun under the new lease (while the worker re-attached) is not
// the janitor's to fail, so nobody settled it. Here the worker abandons a
// call that belongs to its live lease, as that race does, and the call
// must end FAILED in etcd, audited, not RUNNING.
func TestLeaseLossSettlesTheCall(t *testing.T) {
	etcd := etcdtest.Single(t)
	coord := coordinator.New(coordinator.Options{Client: etcd.Client()})
	gs := grpcserver.New(slog.New(slog.DiscardHandler), coord.Registry(), grpcserver.Keepalive{})
	pb.RegisterCoordinatorServiceServer(gs, coord)
	clis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 3)
	go func() { done <- coord.Run(ctx) }()
	go func() { done <- gs.Serve(clis) }()

	started := make(chan struct{}, 1)
	w := New(Options{Coordinator: clis.Addr().String(), Name: "w1", DrainTimeout: time.Second})
	w.Handle(Tool{Name: "block"}, func(ctx context.Context, _ *Call) (*Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	wlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- w.Run(ctx, wlis) }()
	defer func() {
		stop()
		gs.Stop()
		for range 3 {
			<-done
		}
	}()
	<-w.Ready()

	cc := dialT(t, clis.Addr().String())
	cl := pb.NewCoordinatorServiceClient(cc)
	var begun *pb.BeginResponse
	waitUntil(t, "the call begins", func() bool {
		begun, err = cl.Begin(t.Context(), &pb.BeginRequest{
			Key: &pb.CallKey{Scope: "conn:t", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}, Tool: "block",
		})
		return err == nil
	})
	stream, err := pb.NewWorkerServiceClient(dialT(t, wlis.Addr().String())).Execute(t.Context(), &pb.ExecuteRequest{
		CallId: begun.GetCallId(), Fence: begun.GetFence(), Tool: "block", Deadline: begun.GetDeadline(),
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	w.abandonAll()

	var last *pb.ExecuteResponse
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("execute stream: %v", err)
		}
		last = ev
	}
	if last.GetFailed() == nil {
		t.Fatalf("the gateway was told %v, want failed", last)
	}
	got, err := cl.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: begun.GetCallId()}})
	if err != nil {
		t.Fatal(err)
	}
	if c := got.GetCall(); c.GetState() != pb.CallState_CALL_STATE_FAILED || c.GetInitiator() != pb.Initiator_INITIATOR_WORKER_LOST {
		t.Fatalf("call is %v (initiator %v) after the worker abandoned it; want FAILED by worker_lost", c.GetState(), c.GetInitiator())
	}
}

func dialT(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-limit:
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}
