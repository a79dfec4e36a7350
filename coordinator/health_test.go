package coordinator_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// The coordinator's health follows etcd: NOT_SERVING while etcd is down,
// SERVING again once it is back, on the same data.
func TestHealthFollowsEtcd(t *testing.T) {
	dir := t.TempDir()
	opts := embedetcd.Options{Dir: dir, Fast: true, NoFsync: true}
	m, err := embedetcd.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	opts.ClientAddr, opts.PeerAddr = m.ClientURL(), m.PeerURL()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	co := testcluster.StartCoordinator(t, cli, coordinator.Options{HealthInterval: 50 * time.Millisecond, OpTimeout: time.Second})
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
	m.Close()
	testcluster.WaitFor(t, "NOT_SERVING with etcd down", func() bool { return status() == healthpb.HealthCheckResponse_NOT_SERVING })

	t.Logf("NOT_SERVING %v after etcd stopped", time.Since(start).Round(time.Millisecond))
	m2, err := embedetcd.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	start = time.Now()
	testcluster.WaitFor(t, "SERVING with etcd back", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })
	t.Logf("SERVING %v after etcd was back", time.Since(start).Round(time.Millisecond))
}
