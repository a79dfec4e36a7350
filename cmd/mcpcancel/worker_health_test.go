package main

import (
	"net"
	"syscall"
	"testing"

	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestWorkerHealth: a worker's gRPC port answers grpc.health.v1 (the Helm
// chart's readiness probe): NOT_SERVING while it has no coordinator,
// SERVING once attached.
func TestWorkerHealth(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := gone.Addr().String()
	gone.Close()
	lonely := start(t, nil, "worker", "--coordinator", nowhere, "--demo", "--name", "lonely")
	check := func(health healthgrpc.HealthClient) healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return r.GetStatus()
	}
	if got := check(healthgrpc.NewHealthClient(dialTest(t, lonely.waitLine(t, "worker: ")))); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("a worker with no coordinator says %v, want NOT_SERVING", got)
	}

	coord, coordAddr := startCoordinator(t)
	wk := start(t, nil, "worker", "--coordinator", coordAddr, "--demo", "--name", "attached")
	health := healthgrpc.NewHealthClient(dialTest(t, wk.waitLine(t, "worker: ")))
	poll(t, "worker SERVING once attached", func() bool { return check(health) == healthpb.HealthCheckResponse_SERVING })

	for _, p := range []*proc{lonely, wk, coord} {
		p.signal(t, syscall.SIGTERM)
		if code := p.exitCode(t); code != 0 {
			t.Errorf("%v exited %d after SIGTERM, want 0", p.cmd.Args[1:], code)
		}
	}
}
