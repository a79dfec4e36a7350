package coordinator_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// Regression (CI, the worker examples under -race): a worker attaching
// while Run was ending started its stream receiver and lease goroutines
// after Run had begun waiting for them, a WaitGroup Add racing its Wait,
// and nothing waited for them after. The gRPC server outlives Run for a
// moment in every shutdown; an Attach that arrives once Run has ended is
// now refused as Unavailable, and starts nothing.
func TestAttachAfterRunEndedIsRefused(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	srv := coordinator.New(coordinator.Options{Client: cli, Name: "a"})
	g := grpcserver.New(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), grpcserver.Keepalive{})
	pb.RegisterCoordinatorServiceServer(g, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	defer func() { g.Stop(); <-served }()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	<-srv.Ready()
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}

	s, err := pb.NewCoordinatorServiceClient(testcluster.Conn(t, lis.Addr().String())).Attach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The refusal may come before the hello is sent: Send then says EOF,
	// and Recv has the status.
	if err := s.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: &pb.WorkerHello{Name: "late", Address: "127.0.0.1:9"}}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("attach after Run ended: %v, %v; want Unavailable", m, err)
	}
}
