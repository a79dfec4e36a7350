package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// system is the whole of mcpcancel in this process, wired as `mcpcancel
// dev` wires it: an embedded etcd with fsync on, a coordinator serving gRPC
// on loopback, a worker with the demo tools and the bench probe, and a
// gateway serving Streamable HTTP on loopback (and stdio on demand).
type system struct {
	etcd           *embedetcd.Member
	writer, second *clientv3.Client // two etcd clients: the floor's writer and watcher
	coordAddr      string
	gw             *gateway.Gateway
	mcpURL         string
	probes         *probes
	adapter        *upstream.Adapter // the worker's, when it fronts an MCP server

	stops []func() // in reverse order of start
}

func startSystem(ctx context.Context, dir string, log *slog.Logger) (_ *system, err error) {
	return startSystemWith(ctx, dir, log, systemOptions{})
}

// systemOptions varies the system: labels is the prefix of its
// components' pprof labels; upstream, if set, is the command of an MCP
// server the worker fronts (an adapter, every client on one upstream
// session) instead of the demo tools.
type systemOptions struct {
	labels   string
	upstream []string
}

func startSystemWith(ctx context.Context, dir string, log *slog.Logger, o systemOptions) (_ *system, err error) {
	s := &system{probes: newProbes()}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	err = labelled(o.labels+"etcd", func() (err error) {
		s.etcd, err = embedetcd.Start(ctx, embedetcd.Options{Dir: filepath.Join(dir, "etcd")})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.etcd.Close)
	// The writer is the coordinator's client (and the floor's, before
	// any load); the second is the benchmark's.
	for _, c := range []struct {
		cli   **clientv3.Client
		label string
	}{{&s.writer, o.labels + "coordinator"}, {&s.second, ""}} {
		err := labelled(c.label, func() (err error) {
			*c.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{s.etcd.ClientURL()}, Logger: zap.NewNop()})
			return err
		})
		if err != nil {
			return nil, err
		}
		s.stops = append(s.stops, func() { (*c.cli).Close() })
	}
	if err := labelled(o.labels+"coordinator", func() error { return s.startCoordinator(log) }); err != nil {
		return nil, err
	}
	if err := labelled(o.labels+"worker", func() error { return s.startWorker(ctx, log, o.upstream) }); err != nil {
		return nil, err
	}
	return s, labelled(o.labels+"gateway", func() error { return s.startGateway(log) })
}

func (s *system) startCoordinator(log *slog.Logger) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.coordAddr = lis.Addr().String()
	srv := coordinator.New(coordinator.Options{Client: s.writer, Logger: log.With("part", "coordinator")})
	gs := grpcserver.New(log, srv.Registry(), grpcserver.Keepalive{})
	pb.RegisterCoordinatorServiceServer(gs, srv)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Run(ctx) })
	wg.Go(func() { gs.Serve(lis) })
	s.stops = append(s.stops, func() { gs.Stop(); cancel(); wg.Wait() })
	select {
	case <-srv.Ready():
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("coordinator not ready after 30s")
	}
}

func (s *system) startWorker(ctx context.Context, log *slog.Logger, upstreamCmd []string) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	w := worker.New(worker.Options{Coordinator: s.coordAddr, Name: "bench-worker", DrainTimeout: 5 * time.Second, Logger: log.With("part", "worker")})
	if upstreamCmd == nil {
		demo.Register(w)
		w.Handle(probeTool, s.probes.handle)
	} else {
		// One upstream session for every client, as mcp-proxy keeps: the
		// default (a server process per client session) would compare 16
		// processes with mcp-proxy's one.
		s.adapter = upstream.New(w, upstream.Options{Command: upstreamCmd, Sessions: upstream.Shared, Logger: log.With("part", "adapter")})
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx, lis) }()
	s.stops = append(s.stops, func() { cancel(); <-done })
	select {
	case <-w.Ready():
	case <-done:
		return errors.New("worker stopped before it attached")
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.adapter == nil {
		return nil
	}
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan struct{})
	go func() { defer close(adone); s.adapter.Run(actx) }()
	s.stops = append(s.stops, func() { acancel(); <-adone })
	select {
	case <-s.adapter.Ready():
		return nil
	case <-adone:
		return errors.New("the adapter stopped before it registered its tools")
	case <-time.After(60 * time.Second):
		return errors.New("the adapter did not register its tools within 60s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *system) startGateway(log *slog.Logger) error {
	conn, err := dial.New(s.coordAddr)
	if err != nil {
		return err
	}
	s.stops = append(s.stops, func() { conn.Close() })
	s.gw = gateway.New(gateway.Options{Coordinator: conn, Name: "bench-gateway", Logger: log.With("part", "gateway")})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.mcpURL = "http://" + lis.Addr().String() + "/mcp"
	srv := &http.Server{Handler: s.gw.Mux(), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.gw.Run(ctx) })
	wg.Go(func() { srv.Serve(lis) })
	s.stops = append(s.stops, func() { s.gw.Close(); srv.Close(); cancel(); wg.Wait() })
	return nil
}

// close stops everything started, last first.
func (s *system) close() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

// stdioSession connects a Go SDK client to the gateway over an in-process
// stdio pipe pair (what `mcpcancel gateway --stdio` serves). Closing the
// returned session ends the connection; the returned wait waits for the
// gateway to have settled the connection's calls.
func (s *system) stdioSession(ctx context.Context, version string) (*mcp.ClientSession, func(), error) {
	toGW, fromClient := io.Pipe()
	toClient, fromGW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.gw.ServeStdio(context.WithoutCancel(ctx), toGW, fromGW)
		fromGW.Close()
		toGW.Close()
	}()
	wait := func() { <-done }
	cs, err := newClient().Connect(ctx, &mcp.IOTransport{Reader: toClient, Writer: fromClient}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		fromClient.Close()
		wait()
		return nil, nil, fmt.Errorf("stdio connect: %w", err)
	}
	return cs, wait, nil
}

func newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "mcpcancel-bench", Version: "1"}, nil)
}

// httpSession connects a Go SDK client over Streamable HTTP.
func httpSession(ctx context.Context, url, version string, hc *http.Client) (*mcp.ClientSession, error) {
	t := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}
	cs, err := newClient().Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, fmt.Errorf("connect %s (%s): %w", url, version, err)
	}
	return cs, nil
}
