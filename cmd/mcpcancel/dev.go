package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/clientcmd"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

const aboutDev = `Runs everything in one process for trying mcpcancel: an embedded etcd, a
coordinator, a worker with the demo tools (sleep, echo, spin) and a gateway
serving MCP on --http (or on stdio with --stdio; logs then go to stderr only).
With --upstream-stdio or --upstream-http the worker fronts that MCP server
instead of serving the demo tools. Prints one line per endpoint on stderr.
With --stdio it runs beside any other dev: if the default coordinator port
is taken, the coordinator listens on a free one (see its line on stderr).
On SIGINT or SIGTERM it stops the parts in order and removes its temporary
data directory.`

type devFlags struct {
	gatewayFlags
	coordListen string
	// coordListenSet says --coordinator-listen came from the command line
	// or the environment, so dev must not fall back from it.
	coordListenSet bool
	dataDir        string
	leaseTTL       time.Duration
	fixtures       bool
	upstream       upstreamFlags
	console        string
}

func runDev(ctx context.Context, s cmdline.Streams, args []string) error {
	o := &devFlags{}
	f := cmdline.NewFlags(s, "dev", aboutDev)
	o.register(f, false)
	f.StringVar(&o.coordListen, "coordinator-listen", "127.0.0.1:7801", "`HOST:PORT` for the coordinator's gRPC (the default is where mcpcancel call and audit look)")
	f.StringVar(&o.dataDir, "data-dir", "", "`directory` for etcd's data (default: a temporary directory, removed on exit)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "worker lease TTL")
	f.BoolVar(&o.fixtures, "fixtures", false, "also serve the MCP conformance suite's test_* tools")
	f.StringVar(&o.console, "console-listen", clientcmd.DefaultConsoleListen, "loopback `HOST:PORT` for the web console (the default falls back to a free port when taken)")
	o.upstream.register(f, false)
	if err := f.Parse(args); err != nil {
		return err
	}
	f.Visit(func(fl *flag.Flag) { o.coordListenSet = o.coordListenSet || fl.Name == "coordinator-listen" })
	if err := o.upstream.check(); err != nil {
		return cmdline.Usage(err)
	}
	if err := o.check(); err != nil {
		return err
	}
	dir := o.dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "mcpcancel-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	return runDevIn(ctx, s, o, dir)
}

func runDevIn(ctx context.Context, s cmdline.Streams, o *devFlags, dir string) error {
	log := cmdline.NewLogger(s.Stderr, *o.logLevel)
	m, err := embedetcd.Start(ctx, embedetcd.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return err
	}
	defer m.Close()
	fmt.Fprintf(s.Stderr, "etcd: %s (data in %s)\n", m.ClientURL(), dir)
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer etcd.Close()

	coordLis, err := o.listenCoordinator(s.Stderr)
	if err != nil {
		return err
	}
	clog := log.With("part", "coordinator")
	srv := coordinator.New(coordinator.Options{Client: etcd, LeaseTTL: o.leaseTTL, Logger: clog})
	coordCtx, stopCoord := context.WithCancel(context.WithoutCancel(ctx))
	coordDone := make(chan error, 1)
	go func() {
		coordDone <- serveCoordinator(coordCtx, srv, clog, coordLis, nil, 5*time.Second, m.ClientURL())
	}()
	defer func() { stopCoord(); <-coordDone }()
	fmt.Fprintf(s.Stderr, "coordinator: %s\n", coordLis.Addr())

	w, stopWorker, err := startDevWorker(ctx, coordLis.Addr().String(), o, log)
	if err != nil {
		return err
	}
	defer stopWorker()
	fmt.Fprintf(s.Stderr, "worker: %s\n", w)

	conn, err := dial.New(coordLis.Addr().String())
	if err != nil {
		return err
	}
	defer conn.Close()
	stopConsole, err := clientcmd.StartDevConsole(ctx, s.Stderr, conn, o.console, log.With("part", "console"))
	if err != nil {
		return err
	}
	defer stopConsole()
	glog := log.With("part", "gateway")
	gopts := o.options(conn, glog)
	if gopts.Authenticator, err = o.authenticator(glog); err != nil {
		return err
	}
	g := gateway.New(gopts)
	return cmdline.FlagForPort(serveGateway(ctx, s, g, &o.gatewayFlags), "http", o.http)
}

// listenCoordinator listens on --coordinator-listen. With --stdio and the
// default address unusable (another dev holds it), it takes a free port
// instead: MCP hosts start one dev --stdio per client, and the address is
// printed on the "coordinator:" line.
func (o *devFlags) listenCoordinator(stderr io.Writer) (net.Listener, error) {
	lis, err := cmdline.ListenFlag("coordinator-listen", o.coordListen)
	if err == nil || !o.stdio || o.coordListenSet {
		return lis, err
	}
	lis, ferr := net.Listen("tcp", "127.0.0.1:0")
	if ferr != nil {
		return nil, errors.Join(err, ferr)
	}
	fmt.Fprintf(stderr, "note: %s is taken (another mcpcancel dev?), so the coordinator listens on a free port\n", o.coordListen)
	return lis, nil
}

// startDevWorker starts the demo worker and waits until it has attached.
func startDevWorker(ctx context.Context, coord string, o *devFlags, log *slog.Logger) (string, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	w := worker.New(worker.Options{Coordinator: coord, Name: "dev-worker", DrainTimeout: o.grace})
	stopUpstream, err := devTools(ctx, w, o, log)
	if err != nil {
		lis.Close()
		return "", nil, err
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx, lis) }()
	stopWorker := func() { stop(); <-done; stopUpstream() }
	select {
	case <-w.Attached():
		return lis.Addr().String(), stopWorker, nil
	case err := <-done:
		stop()
		stopUpstream()
		return "", nil, fmt.Errorf("demo worker: %w", err)
	case <-ctx.Done():
		stopWorker()
		return "", nil, ctx.Err()
	}
}

// devTools gives the dev worker its tools: the demo ones, or an upstream
// server's. It returns what stops the upstream server, once the worker
// has drained.
func devTools(ctx context.Context, w *worker.Worker, o *devFlags, log *slog.Logger) (func() error, error) {
	if !o.upstream.set() {
		demo.Register(w)
		if o.fixtures {
			demo.RegisterFixtures(w)
		}
		return func() error { return nil }, nil
	}
	a, err := o.upstream.adapter(w, log)
	if err != nil {
		return nil, err
	}
	stop := startAdapter(ctx, a)
	select {
	case <-a.Ready():
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}
