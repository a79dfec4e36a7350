// Package surface tests the MCP surface beyond tools through the real
// gateway: resources, resource templates, prompts and completions of a
// fronted server (the reference server-everything, over stdio and HTTP)
// asked by the official TypeScript client and the Go SDK client, directly
// and through mcpcancel; and the MCP Inspector listing them.
package surface

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

func TestMain(m *testing.M) {
	if f := os.Getenv(slowServerEnv); f != "" {
		os.Exit(runSlowServer(f)) // the fronted server of a test
	}
	goleak.VerifyTestMain(m)
}

// system is etcd, a coordinator, a gateway and one worker.
type system struct {
	etcd  *clientv3.Client
	coord pb.CoordinatorServiceClient
	gw    *gateway.Gateway
	url   string // the gateway's MCP endpoint
}

// startSystem runs etcd, a coordinator and a gateway, and a worker that
// register sets up.
func startSystem(t *testing.T, register func(*worker.Worker)) *system {
	t.Helper()
	e := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, e.Client(), coordinator.Options{})
	s := &system{etcd: e.Client(), coord: c.Client(t)}
	s.gw, s.url = testcluster.StartGateway(t, c.Conn(t), gateway.Options{})
	testcluster.StartWorker(t, worker.Options{Coordinator: c.Addr, Name: "w"}, register)
	return s
}

// startFronting runs a system whose worker fronts the server opts names,
// and waits until its resources are in the catalogue.
func startFronting(t *testing.T, opts upstream.Options) *system {
	t.Helper()
	var a *upstream.Adapter
	s := startSystem(t, func(w *worker.Worker) { a = upstream.New(w, opts) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("adapter Run: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("the adapter stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the adapter did not register the server")
	}
	testcluster.WaitFor(t, "the upstream's resources in the catalogue", func() bool {
		resp, err := s.coord.ListTools(t.Context(), &pb.ListToolsRequest{})
		return err == nil && len(resp.GetOffers()) > 0
	})
	return s
}

// everything is server-everything's entry point.
func everything(t *testing.T) string {
	t.Helper()
	return filepath.Join(nodetest.Install(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// httpEverything runs server-everything in Streamable HTTP mode and
// returns its URL.
func httpEverything(t *testing.T) string {
	t.Helper()
	script := everything(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := worker.Command(ctx, "node", script, "streamableHttp")
	cmd.Env = append(cmd.Environ(), "PORT="+port)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() // owned: the cleanup waits for it
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("server-everything output:\n%s", out.String())
		}
	})
	testcluster.WaitFor(t, "server-everything's HTTP port", func() bool {
		select {
		case <-exited:
			t.Fatalf("server-everything exited: %v", cmd.ProcessState)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "http://" + addr + "/mcp"
}
