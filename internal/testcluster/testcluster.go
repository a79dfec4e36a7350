// Package testcluster starts real coordinator replicas and workers inside a
// test, over real gRPC on loopback, against a real (embedded) etcd.
package testcluster

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// TestKeepalive is the keepalive of the servers tests start: a silent
// client is dropped within 2 s.
var TestKeepalive = grpcserver.Keepalive{Time: time.Second, Timeout: time.Second}

var discard = slog.New(slog.DiscardHandler)

// Coordinator is a replica serving gRPC on loopback, built by the
// production constructor so tests run the production interceptors.
type Coordinator struct {
	Addr   string
	Server *coordinator.Server

	stopOnce sync.Once
	cancel   context.CancelFunc
	grpc     *grpc.Server
	done     chan error
}

// StartCoordinator starts a replica and waits until it serves.
func StartCoordinator(t testing.TB, cli *clientv3.Client, opts coordinator.Options) *Coordinator {
	t.Helper()
	return StartCoordinatorKeepalive(t, cli, opts, TestKeepalive)
}

// StartCoordinatorKeepalive starts a replica whose server uses ka.
func StartCoordinatorKeepalive(t testing.TB, cli *clientv3.Client, opts coordinator.Options, ka grpcserver.Keepalive) *Coordinator {
	t.Helper()
	opts.Client = cli
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := coordinator.New(opts)
	c := &Coordinator{Addr: lis.Addr().String(), Server: srv, grpc: grpcserver.New(discard, srv.Registry(), ka), done: make(chan error, 2)}
	pb.RegisterCoordinatorServiceServer(c.grpc, c.Server)
	healthgrpc.RegisterHealthServer(c.grpc, c.Server.Health())
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.done <- c.Server.Run(ctx) }()
	go func() { c.done <- c.grpc.Serve(lis) }()
	select {
	case <-c.Server.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("coordinator not ready")
	}
	t.Cleanup(c.Stop)
	return c
}

// Stop kills the replica's gRPC server at once and stops it; idempotent.
func (c *Coordinator) Stop() {
	c.stopOnce.Do(func() {
		c.grpc.Stop()
		c.cancel()
		<-c.done
		<-c.done
	})
}

// Client dials the replica.
func (c *Coordinator) Client(t testing.TB) pb.CoordinatorServiceClient {
	return pb.NewCoordinatorServiceClient(c.Conn(t))
}

// Conn dials the replica, for a gateway (gateway.Options.Coordinator).
func (c *Coordinator) Conn(t testing.TB) *grpc.ClientConn { return Conn(t, c.Addr) }

// Conn dials target in plaintext and closes the connection at test end.
func Conn(t testing.TB, target string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Worker is a worker runtime serving Execute on loopback.
type Worker struct {
	*worker.Worker
	Addr string

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan error
}

// StartWorker starts a worker whose tools register registers, and waits
// until it has attached to a coordinator.
func StartWorker(t testing.TB, opts worker.Options, register func(*worker.Worker)) *Worker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	opts.ServerOptions = append(TestKeepalive.ServerOptions(), opts.ServerOptions...)
	w := &Worker{Worker: worker.New(opts), Addr: lis.Addr().String(), done: make(chan error, 1)}
	register(w.Worker)
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() { w.done <- w.Run(ctx, lis) }()
	select {
	case <-w.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not attach")
	}
	t.Cleanup(w.Stop)
	return w
}

// Stop drains and stops the worker; idempotent.
func (w *Worker) Stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		<-w.done
	})
}

// Client dials the worker's Execute service.
func (w *Worker) Client(t testing.TB) pb.WorkerServiceClient {
	return pb.NewWorkerServiceClient(Conn(t, w.Addr))
}

// GRPCServer builds a test's gRPC server with the production constructor
// (its interceptors, limits and, here, TestKeepalive), plus opts.
func GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	return grpcserver.New(discard, prometheus.NewRegistry(), TestKeepalive, opts...)
}
