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
	"strings"
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
instead of serving the demo tools; --upstream-config filters and tunes its
tools (see the worker command). The "servers" of the --config file front
several servers at once, each by name, their tools and prompts prefixed
with it (see docs/config.md). An upstream server that cannot be started,
or does not answer initialize within --upstream-connect-timeout, is an
error naming it, with the last lines it wrote to stderr.
Every address is bound before anything starts; all that are in use are
reported together. Left to their defaults, the console (and, with --stdio,
the coordinator) take a free port when theirs is in use, so that dev runs
beside another dev: see their lines on stderr. Prints one line per endpoint
on stderr.
On SIGINT or SIGTERM it stops the parts in order, letting calls in flight
finish for --shutdown-grace, and removes its temporary data directory; a
second signal exits at once, and removes it too.`

// devGrace is dev's --shutdown-grace: short, as its calls are a user's
// own tries.
const devGrace = 5 * time.Second

type devFlags struct {
	gatewayFlags
	coordListen string
	// coordListenSet and consoleSet say the flag came from the command
	// line, the environment or the --config file, so dev must not fall
	// back from it.
	coordListenSet, consoleSet bool
	dataDir                    string
	leaseTTL                   time.Duration
	fixtures                   bool
	upstream                   upstreamFlags
	servers                    servers // the --config file's
	console                    string
}

func runDev(ctx context.Context, s cmdline.Streams, args []string) error {
	o, err := parseDevFlags(s, args)
	if err != nil {
		return err
	}
	lis := o.listeners()
	if err := cmdline.ListenAll(lis.all()...); err != nil {
		return err
	}
	defer lis.close() // those not served
	if err := lis.check(s.Stderr, o); err != nil {
		return err
	}
	dir := o.dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "mcpcancel-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		shutdownOf(ctx).onExit(func() { removeAll(tmp) })
		dir = tmp
	}
	err = runDevIn(ctx, s, o, dir, lis)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // a signal while starting: stopped as asked
	}
	return err
}

func parseDevFlags(s cmdline.Streams, args []string) (*devFlags, error) {
	o := &devFlags{}
	f := cmdline.NewFlags(s, "dev", aboutDev)
	o.register(f, false)
	setDefault(f, "shutdown-grace", devGrace.String())
	f.StringVar(&o.coordListen, "coordinator-listen", "127.0.0.1:7801", "`HOST:PORT` for the coordinator's gRPC (the default is where mcpcancel call and audit look)")
	f.StringVar(&o.dataDir, "data-dir", "", "`directory` for etcd's data (default: a temporary directory, removed on exit)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "worker lease TTL")
	f.BoolVar(&o.fixtures, "fixtures", false, "also serve the MCP conformance suite's test_* tools")
	f.StringVar(&o.console, "console-listen", clientcmd.DefaultConsoleListen, "loopback `HOST:PORT` for the web console; left to the default, a free port is taken when that one is in use; given, it must be free")
	o.upstream.register(f, false)
	file := f.Config(serversKey)
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.servers, err = parseServers(file, &o.upstream); err != nil {
		return nil, cmdline.Usage(err)
	}
	if o.servers.set() && o.upstream.given() {
		return nil, cmdline.Usage(errServersAndUpstream)
	}
	f.Visit(func(fl *flag.Flag) {
		o.coordListenSet = o.coordListenSet || fl.Name == "coordinator-listen"
		o.consoleSet = o.consoleSet || fl.Name == "console-listen"
	})
	if err := o.upstream.check(); err != nil {
		return nil, cmdline.Usage(err)
	}
	return o, o.check()
}

// setDefault gives the flag name another default than the one it was
// defined with.
func setDefault(f *cmdline.Flags, name, value string) {
	fl := f.Lookup(name)
	if err := fl.Value.Set(value); err != nil {
		panic(err)
	}
	fl.DefValue = value
}

// removeAll removes dir while etcd may still write in it (a second
// signal): a file created meanwhile fails one pass, not the next.
func removeAll(dir string) {
	for range 3 {
		if os.RemoveAll(dir) == nil {
			return
		}
	}
}

// devListeners are dev's addresses, bound before anything starts.
type devListeners struct {
	gateway                gatewayListeners
	coord, console, worker *cmdline.Addr
}

// listeners are dev's addresses. With --stdio, the coordinator left to
// its default takes a free port when another dev holds it (MCP hosts
// start one dev --stdio per client); the console left to its default
// always does, as nothing else looks for it there. An address given is
// kept: taken, it is an error.
func (o *devFlags) listeners() devListeners {
	return devListeners{
		gateway: o.gatewayFlags.listeners(),
		coord:   &cmdline.Addr{Flag: "coordinator-listen", Addr: o.coordListen, Fallback: o.stdio && !o.coordListenSet},
		console: &cmdline.Addr{Flag: "console-listen", Addr: o.console, Fallback: !o.consoleSet},
		worker:  &cmdline.Addr{Flag: "", Addr: "127.0.0.1:0"},
	}
}

func (l devListeners) all() []*cmdline.Addr {
	return []*cmdline.Addr{l.gateway.http, l.coord, l.console, l.gateway.admin, l.worker}
}

func (l devListeners) close() { closeListeners(l.all()...) }

// check refuses a console beyond loopback, and notes the addresses that
// fell back to a free port.
func (l devListeners) check(stderr io.Writer, o *devFlags) error {
	if a, ok := l.console.Lis.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		return cmdline.Usage(fmt.Errorf("--console-listen %s: dev serves its console on loopback only; run 'mcpcancel console' with certificates to expose it", o.console))
	}
	if l.coord.FellBack {
		fmt.Fprintf(stderr, "note: %s is taken (another mcpcancel dev?), so the coordinator listens on a free port\n", o.coordListen)
	}
	if l.console.FellBack {
		fmt.Fprintf(stderr, "note: %s is taken (another mcpcancel dev?), so the console listens on a free port\n", o.console)
	}
	return nil
}

func runDevIn(ctx context.Context, s cmdline.Streams, o *devFlags, dir string, lis devListeners) error {
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

	coordLis := lis.coord.Lis
	clog := log.With("part", "coordinator")
	srv := coordinator.New(coordinator.Options{Client: etcd, LeaseTTL: o.leaseTTL, Logger: clog})
	coordCtx, stopCoord := context.WithCancel(context.WithoutCancel(ctx))
	coordDone := make(chan error, 1)
	go func() {
		coordDone <- serveCoordinator(coordCtx, srv, clog, coordLis, nil, 5*time.Second, m.ClientURL())
	}()
	defer func() { stopCoord(); <-coordDone }()
	fmt.Fprintf(s.Stderr, "coordinator: %s\n", coordLis.Addr())

	w, stopWorker, err := startDevWorker(ctx, s.Stderr, coordLis.Addr().String(), o, lis.worker.Lis, log)
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
	stopConsole, err := clientcmd.StartDevConsole(ctx, s.Stderr, conn, lis.console.Lis, log.With("part", "console"))
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
	shutdownOf(ctx).waitsFor(func() string { return callsInFlight(g.Registry(), gatewayInFlight, o.grace) })
	return serveGateway(ctx, s, g, &o.gatewayFlags, lis.gateway)
}

// startDevWorker starts the demo worker and waits until it has attached.
func startDevWorker(ctx context.Context, stderr io.Writer, coord string, o *devFlags, lis net.Listener, log *slog.Logger) (string, func(), error) {
	w := worker.New(worker.Options{Coordinator: coord, Name: "dev-worker", DrainTimeout: o.grace})
	stopUpstream, err := devTools(ctx, stderr, w, o, log)
	if err != nil {
		return "", nil, err
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx, lis) }()
	stopWorker := func() { stop(); <-done; stopUpstream() }
	select {
	case <-w.Ready():
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
func devTools(ctx context.Context, stderr io.Writer, w *worker.Worker, o *devFlags, log *slog.Logger) (func() error, error) {
	if o.servers.set() {
		return devServers(ctx, stderr, w, o, log)
	}
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
	what := o.upstream.http
	if o.upstream.stdio != "" {
		what = o.upstream.stdio
	}
	if err := waitReady(ctx, stderr, a.WaitReady, "the upstream MCP server ("+what+")", o.upstream.connectWait); err != nil {
		stop()
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the upstream MCP server did not start: %w", err)
	}
	return stop, nil
}

// devServers fronts the config file's servers from the dev worker, and
// waits until each has started.
func devServers(ctx context.Context, stderr io.Writer, w *worker.Worker, o *devFlags, log *slog.Logger) (func() error, error) {
	g, err := o.servers.group(w, log)
	if err != nil {
		return nil, err
	}
	stop := startGroup(ctx, g)
	longest := time.Duration(0)
	for _, u := range o.servers {
		longest = max(longest, u.connectWait)
	}
	what := "the upstream MCP servers (" + strings.Join(o.servers.names(), ", ") + ")"
	if err := waitReady(ctx, stderr, g.WaitReady, what, longest); err != nil {
		stop()
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("an upstream MCP server did not start: %w", err)
	}
	return stop, nil
}

// startNoteAfter is how long dev waits for an upstream server in silence
// before saying what it waits for.
const startNoteAfter = 2 * time.Second

// waitReady waits for upstream servers to start (wait is
// upstream.Adapter.WaitReady or upstream.Group.WaitReady), saying on
// stderr what it waits for once that takes a while (npx may be
// downloading a server).
func waitReady(ctx context.Context, stderr io.Writer, wait func(context.Context) error, what string, upTo time.Duration) error {
	quiet, cancel := context.WithTimeout(ctx, startNoteAfter)
	err := wait(quiet)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return err
	}
	fmt.Fprintf(stderr, "waiting for %s to answer initialize, up to %v (--upstream-connect-timeout)\n", what, upTo)
	return wait(ctx)
}
