package coordinator_test

import (
	"testing"
	"time"

	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// The coordinator's health follows etcd: NOT_SERVING while etcd is down,
// SERVING again once it is back, on the same data.
func TestHealthFollowsEtcd(t *testing.T) {
	etcd := etcdtest.StartRestartable(t)
	co := testcluster.StartCoordinator(t, etcd.Client(), coordinator.Options{HealthInterval: 50 * time.Millisecond, OpTimeout: time.Second})
	hc := healthgrpc.NewHealthClient(testcluster.Conn(t, co.Addr))
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "mcpcancel.v1.CoordinatorService"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	testcluster.WaitFor(t, "SERVING", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })

	start := time.Now()
	etcd.Stop()
	testcluster.WaitFor(t, "NOT_SERVING with etcd down", func() bool { return status() == healthpb.HealthCheckResponse_NOT_SERVING })

	t.Logf("NOT_SERVING %v after etcd stopped", time.Since(start).Round(time.Millisecond))
	etcd.Start()
	start = time.Now()
	testcluster.WaitFor(t, "SERVING with etcd back", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })
	t.Logf("SERVING %v after etcd was back", time.Since(start).Round(time.Millisecond))
}
