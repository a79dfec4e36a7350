package dial

import (
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// openHealth serves gRPC health on loopback for the test, and opens a Conn
// to it, closed (with the server) when the test ends.
func openHealth(t *testing.T) *Conn {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpcserver.New(slog.New(slog.DiscardHandler), prometheus.NewRegistry(), grpcserver.Keepalive{})
	healthgrpc.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }() // owned: stopped and waited at cleanup
	t.Cleanup(func() { srv.Stop(); <-served })
	c, err := Open(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Redial replaces the connection once per generation, however many
// callers found it dead, and the fresh one serves RPCs.
func TestRedialOncePerGeneration(t *testing.T) {
	c := openHealth(t)
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

// RedialAfter sends new RPCs to the fresh connection at once, and leaves
// what rides the old one (here a Watch stream) running for its grace;
// then the old connection closes and the stream ends. Close ends a grace
// at once.
func TestRedialAfterLetsTheOldConnectionFinish(t *testing.T) {
	c := openHealth(t)
	watch := func() healthgrpc.Health_WatchClient {
		t.Helper()
		w, err := healthgrpc.NewHealthClient(c).Watch(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		return w
	}
	old := watch()
	const grace = 500 * time.Millisecond
	redialled := time.Now()
	if ok, err := c.RedialAfter(c.Gen(), grace); !ok || err != nil {
		t.Fatalf("RedialAfter = %v, %v", ok, err)
	}
	fresh := watch() // on the fresh connection, during the old one's grace
	_, err := old.Recv()
	if took := time.Since(redialled); status.Code(err) != codes.Canceled || took < grace {
		t.Fatalf("the old connection's stream ended after %v with %v; want Canceled after its %v grace", took, err, grace)
	}
	if ok, err := c.RedialAfter(c.Gen(), time.Hour); !ok || err != nil {
		t.Fatalf("second RedialAfter = %v, %v", ok, err)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }() // owned: waited below
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited out an hour's grace")
	}
	if _, err := fresh.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("after Close the retiring connection's stream got %v, want Canceled", err)
	}
}
