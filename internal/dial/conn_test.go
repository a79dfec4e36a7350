package dial

import (
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Redial replaces the connection once per generation, however many
// callers found it dead, and the fresh one serves RPCs.
func TestRedialOncePerGeneration(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpcserver.New(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), grpcserver.Keepalive{})
	healthgrpc.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }() // owned: stopped and waited below
	defer func() { srv.Stop(); <-served }()

	c, err := Open(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	check := func() {
		t.Helper()
		r, err := healthgrpc.NewHealthClient(c).Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check on generation %d: %v, %v", c.Gen(), r, err)
		}
	}
	check()
	gen := c.Gen()
	if ok, err := c.Redial(gen); !ok || err != nil {
		t.Fatalf("first redial of generation %d = %v, %v; want it replaced", gen, ok, err)
	}
	if ok, err := c.Redial(gen); ok || err != nil {
		t.Fatalf("second redial of generation %d = %v, %v; want nothing done", gen, ok, err)
	}
	if c.Gen() != gen+1 {
		t.Fatalf("generation %d after one redial of %d", c.Gen(), gen)
	}
	check()
	c.Close()
	if _, err := c.Redial(c.Gen()); !errors.Is(err, ErrClosed) {
		t.Fatalf("redial after Close = %v, want ErrClosed", err)
	}
}
