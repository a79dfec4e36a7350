//go:build unix

package worker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
)

// A worker that holds the coordinator's stop order when its handler
// returns issues no settle RPC: the order is the decision. Whether the
// handler completes anyway (a stubborn tool) or its caller has gone too
// (the gateway closed the stream after its cancel won), the call ends as
// the order says, and the coordinator answers no Complete, Fail or
// Cancel from the worker.
func TestOrderedCallSendsNoSettle(t *testing.T) {
	for _, tc := range []struct {
		name        string
		closeStream bool // the caller goes too, as the gateway's fast path does
	}{{"handler completes", false}, {"caller gone", true}} {
		t.Run(tc.name, func(t *testing.T) {
			env := startOrderedEnv(t)
			begun, err := env.coord.Begin(t.Context(), &pb.BeginRequest{
				Key: &pb.CallKey{Scope: "conn:t", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}, Tool: "stubborn",
			})
			if err != nil {
				t.Fatal(err)
			}
			sctx, closeStream := context.WithCancel(t.Context())
			defer closeStream()
			stream, err := env.exec.Execute(sctx, &pb.ExecuteRequest{CallId: begun.GetCallId(), Fence: begun.GetFence(), Tool: "stubborn", Deadline: begun.GetDeadline()})
			if err != nil {
				t.Fatal(err)
			}
			<-env.started
			resp, err := env.coord.Cancel(t.Context(), &pb.CancelRequest{
				Target:    &pb.CancelRequest_Key{Key: &pb.CallKey{Scope: "conn:t", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}},
				Initiator: pb.Initiator_INITIATOR_CLIENT, Reason: "the client's",
			})
			if err != nil || resp.GetResult() != pb.CancelResult_CANCEL_RESULT_CANCELLED {
				t.Fatalf("cancel: %v %v", resp, err)
			}
			if tc.closeStream {
				closeStream()
			}
			waitUntil(t, "the stop order reaches the worker", func() bool {
				env.w.mu.Lock()
				e := env.w.calls[begun.GetCallId()]
				env.w.mu.Unlock()
				return e != nil && e.decided() != nil
			})
			before := settleRPCs(t, env.reg)
			close(env.release)
			if !tc.closeStream {
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
				if c := last.GetCancelled(); c == nil || c.GetInitiator() != pb.Initiator_INITIATOR_CLIENT || c.GetReason() != "the client's" {
					t.Fatalf("the gateway was told %v, want the client's cancellation", last)
				}
			}
			waitUntil(t, "the worker ends the call", func() bool {
				env.w.mu.Lock()
				defer env.w.mu.Unlock()
				return len(env.w.calls) == 0
			})
			if after := settleRPCs(t, env.reg); after != before {
				t.Errorf("the worker sent %v settle RPCs after its stop order, want none", after-before)
			}
			got, err := env.coord.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: begun.GetCallId()}})
			if err != nil || got.GetCall().GetState() != pb.CallState_CALL_STATE_CANCELLED {
				t.Fatalf("call: %v %v, want CANCELLED", got, err)
			}
		})
	}
}

type orderedEnv struct {
	w       *Worker
	reg     *prometheus.Registry
	coord   pb.CoordinatorServiceClient
	exec    pb.WorkerServiceClient
	started chan struct{}
	release chan struct{}
}

// startOrderedEnv runs a coordinator on a real etcd and a worker with a
// stubborn tool: it returns a result only when released, cancelled or not.
func startOrderedEnv(t *testing.T) *orderedEnv {
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
	env := &orderedEnv{reg: coord.Registry(), started: make(chan struct{}, 1), release: make(chan struct{})}
	env.w = New(Options{Coordinator: clis.Addr().String(), Name: "w1"})
	env.w.Handle(Tool{Name: "stubborn"}, func(ctx context.Context, _ *Call) (*Result, error) {
		env.started <- struct{}{}
		<-env.release
		return Text("done anyway"), nil
	})
	wlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- env.w.Run(ctx, wlis) }()
	t.Cleanup(func() {
		stop()
		gs.Stop()
		for range 3 {
			<-done
		}
	})
	<-env.w.Ready()
	env.coord = pb.NewCoordinatorServiceClient(dialT(t, clis.Addr().String()))
	env.exec = pb.NewWorkerServiceClient(dialT(t, wlis.Addr().String()))
	waitUntil(t, "the tool is offered", func() bool {
		resp, err := env.coord.ListTools(t.Context(), nil)
		return err == nil && len(resp.GetTools()) == 1
	})
	return env
}

// settleRPCs counts the Complete, Fail and Cancel RPCs the coordinator
// answered, and the completions it took on control streams. (This
// package's own tests cannot use testcluster, which imports it.)
func settleRPCs(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "mcpcancel_coordinator_stream_completions_total" {
			n += mf.GetMetric()[0].GetCounter().GetValue()
		}
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" && (l.GetValue() == "Complete" || l.GetValue() == "Fail" || l.GetValue() == "Cancel") {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
