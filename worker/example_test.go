package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/worker"
)

// A tool is a name, a description, an input schema (inferred from a
// struct when not given) and a handler. Handle it, Run the worker, and
// every gateway in front of the coordinator offers it.
func ExampleWorker_Handle() {
	cs, stop := exampleStack(func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "greet", Description: "greets someone"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			var args struct{ Name string }
			if err := c.Bind(&args); err != nil {
				return nil, err // the client gets a tool error
			}
			return worker.Text("hello, " + args.Name), nil
		})
	}, nil)
	defer stop()

	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "Ada"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output: hello, Ada
}

// A handler's context ends the moment its call is cancelled, whoever
// cancelled it: here the client, with notifications/cancelled. The
// handler stops its work and returns; no response goes out.
func ExampleHandler_cancelled() {
	stopped := make(chan error, 1)
	cs, stop := exampleStack(func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "wait", Description: "waits until cancelled"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			<-ctx.Done() // a real handler passes ctx to its work
			stopped <- ctx.Err()
			return nil, ctx.Err()
		})
	}, nil)
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait"})
	fmt.Println("client:", errors.Is(err, context.DeadlineExceeded))
	fmt.Println("handler:", <-stopped)
	// Output:
	// client: true
	// handler: context canceled
}

// Progress goes to a client that asked for it (a progress token), in
// order and never after the result. It is lossy by design: a client that
// reads slower than the handler reports sees the latest value, not every
// step, so the handler never waits on it. A handler can check
// WantsProgress to skip the work of reporting.
func ExampleCall_Progress() {
	var mu sync.Mutex
	var seen []float64
	progress := func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Params.Progress)
	}
	cs, stop := exampleStack(func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "count", Description: "counts to three"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			for i := 1; i <= 3 && c.WantsProgress(); i++ {
				c.Progress(float64(i), 3, fmt.Sprintf("step %d", i))
			}
			return worker.Text("counted"), nil
		})
	}, progress)
	defer stop()

	params := &mcp.CallToolParams{Name: "count"}
	params.SetProgressToken("example")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("progress in order, of the three steps:", slices.IsSorted(seen) && len(seen) <= 3 && !slices.Contains(seen, 0))
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// progress in order, of the three steps: true
	// counted
}

// exampleStack runs, in this process, what a worker needs around it: an
// embedded etcd, a coordinator, and a gateway serving MCP, with one
// worker serving register's tools. It returns an MCP client session to
// the gateway (its progress notifications going to progress) and what
// stops everything.
func exampleStack(register func(*worker.Worker), progress func(context.Context, *mcp.ProgressNotificationClientRequest)) (*mcp.ClientSession, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var stops []func() // run in reverse
	stop := func() {
		cancel()
		for _, f := range slices.Backward(stops) {
			f()
		}
	}
	must := func(err error) {
		if err != nil {
			stop()
			log.Fatal(err)
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "worker-example-")
	must(err)
	stops = append(stops, func() { os.RemoveAll(dir) })
	m, err := embedetcd.Start(ctx, embedetcd.Options{Dir: dir, Fast: true, NoFsync: true, Logger: zap.NewNop()})
	must(err)
	stops = append(stops, func() { m.Close() })
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, Logger: zap.NewNop()})
	must(err)
	stops = append(stops, func() { etcd.Close() })

	coordLis, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	coord := coordinator.New(coordinator.Options{Client: etcd, Logger: quiet})
	srv := grpcserver.New(quiet, prometheus.NewRegistry(), grpcserver.Keepalive{})
	pb.RegisterCoordinatorServiceServer(srv, coord)
	healthgrpc.RegisterHealthServer(srv, coord.Health())
	done := make(chan error, 2)
	go func() { done <- coord.Run(ctx) }()
	go func() { done <- srv.Serve(coordLis) }()
	stops = append(stops, func() { srv.Stop(); <-done; <-done })
	<-coord.Ready()

	w := worker.New(worker.Options{Coordinator: coordLis.Addr().String(), Name: "example", Logger: quiet})
	register(w)
	workerLis, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(ctx, workerLis) }()
	stops = append(stops, func() { <-workerDone })
	<-w.Ready()

	conn, err := dial.New(coordLis.Addr().String())
	must(err)
	stops = append(stops, func() { conn.Close() })
	g := gateway.New(gateway.Options{Coordinator: conn, Logger: quiet})
	gatewayDone := make(chan struct{})
	go func() { defer close(gatewayDone); g.Run(ctx) }()
	web := httptest.NewServer(g.Mux())
	stops = append(stops, func() { <-gatewayDone }, func() { g.Close(); web.CloseClientConnections(); web.Close() })

	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "v1"}, &mcp.ClientOptions{ProgressNotificationHandler: progress})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: web.URL + "/mcp"}, nil)
	must(err)
	stops = append(stops, func() { cs.Close() })
	for { // until the gateway has heard of the worker's tools
		tools, err := cs.ListTools(ctx, nil)
		must(err)
		if len(tools.Tools) > 0 {
			return cs, stop
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			must(ctx.Err())
		}
	}
}
