package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// ErrNoTools means the worker was given no tools to serve.
var ErrNoTools = errors.New("no tools: pass --demo, --upstream-stdio or --upstream-http, or name servers in the --config file")

const aboutWorker = `Runs a worker: it attaches to a coordinator, offers its tools there and
runs the calls gateways send it. --demo serves the demo tools sleep, echo
and spin; --upstream-stdio or --upstream-http fronts an existing MCP server
instead, offering its tools; the "servers" of the --config file front
several at once, each by name, their tools and prompts prefixed with it
(see docs/config.md). It restarts a stdio server that dies, and one that
fails to start, logging why with the last of its stderr; a program not
found is refused at once. On SIGINT or SIGTERM it stops taking calls,
waits up to --drain-timeout for running ones (cancelling the rest),
detaches, and then stops the upstream servers.`

type workerFlags struct {
	coordinator, listen, advertise, name string
	admin                                string
	demo, fixtures                       bool
	capacity                             int
	drain, taskRunScan                   time.Duration
	logLevel                             *slog.Level
	tls                                  tlsconfig.Files
	upstream                             upstreamFlags
	servers                              servers // the --config file's
}

func parseWorkerFlags(s cmdline.Streams, args []string) (*workerFlags, error) {
	o := &workerFlags{}
	f := cmdline.NewFlags(s, "worker", aboutWorker)
	f.StringVar(&o.coordinator, "coordinator", "127.0.0.1:7801", "coordinator `address`: HOST:PORT, dns:///NAME:PORT, or a comma-separated list")
	f.StringVar(&o.listen, "listen", "127.0.0.1:0", "`HOST:PORT` to serve Execute on (port 0 picks a free one)")
	f.StringVar(&o.advertise, "advertise", "", "`HOST:PORT` gateways dial to reach this worker (default: the listen address)")
	f.StringVar(&o.name, "name", "", "worker `name`, unique among live workers (default: host name and a random suffix)")
	f.StringVar(&o.admin, "admin", "", "`HOST:PORT` to serve /metrics on; empty serves none")
	f.BoolVar(&o.demo, "demo", false, "serve the demo tools sleep, echo and spin")
	f.BoolVar(&o.fixtures, "fixtures", false, "with --demo, also serve the MCP conformance suite's test_* and task tools")
	f.IntVar(&o.capacity, "capacity", 0, "most calls to run at once; 0 means no limit")
	f.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "how long shutdown waits for running calls before cancelling them")
	f.DurationVar(&o.taskRunScan, "task-run-scan", 5*time.Second, "how often to ask for runs of this worker's tasks that no gateway started (their gateway was lost), to start them")
	f.TLS(&o.tls)
	o.upstream.register(f, true)
	o.logLevel = f.LogLevel()
	file := f.Config(serversKey)
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.servers, err = parseServers(file, &o.upstream); err != nil {
		return nil, cmdline.Usage(err)
	}
	return o, o.check()
}

func (o *workerFlags) check() error {
	switch {
	case !o.demo && !o.upstream.set() && !o.servers.set():
		return cmdline.Usage(ErrNoTools)
	case o.fixtures && !o.demo:
		return cmdline.Usage(errors.New("--fixtures needs --demo"))
	case o.servers.set() && o.upstream.given():
		return cmdline.Usage(errServersAndUpstream)
	case o.demo && (o.upstream.set() || o.servers.set()):
		return cmdline.Usage(errors.New("--demo and an upstream server cannot share a worker: run two workers"))
	case o.advertise == "" && everyInterface(o.listen):
		return cmdline.Usage(fmt.Errorf("--listen %s takes every interface: pass --advertise HOST:PORT, the address gateways dial", o.listen))
	case o.coordinator == "":
		return cmdline.Usage(errors.New("no coordinator: pass --coordinator HOST:PORT"))
	case o.capacity < 0:
		return cmdline.Usage(fmt.Errorf("--capacity must not be negative, not %d", o.capacity))
	case o.drain <= 0:
		return cmdline.Usage(fmt.Errorf("--drain-timeout must be positive, not %v", o.drain))
	case o.taskRunScan <= 0:
		return cmdline.Usage(fmt.Errorf("--task-run-scan must be positive, not %v", o.taskRunScan))
	}
	if err := o.upstream.check(); err != nil {
		return cmdline.Usage(err)
	}
	return nil
}

// capacityFor is --capacity bounded by what the upstream servers take.
func (o *workerFlags) capacityFor() int {
	if o.servers.set() {
		return o.servers.capacity(o.capacity)
	}
	return o.upstream.capacity(o.capacity)
}

// everyInterface says whether addr listens on the unspecified address,
// which is no address to advertise.
func everyInterface(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && (host == "" || net.ParseIP(host).IsUnspecified())
}

func runWorker(ctx context.Context, s cmdline.Streams, args []string) error {
	o, err := parseWorkerFlags(s, args)
	if err != nil {
		return err
	}
	execLis, adminLis := &cmdline.Addr{Flag: "listen", Addr: o.listen}, &cmdline.Addr{Flag: "admin", Addr: o.admin}
	if err := cmdline.ListenAll(execLis, adminLis); err != nil {
		return err
	}
	defer closeListeners(execLis, adminLis) // on an early return
	lis := execLis.Lis
	log := cmdline.NewLogger(s.Stderr, *o.logLevel)
	sec, err := cmdline.LoadTLS(o.tls, log)
	if err != nil {
		return err
	}
	w := worker.New(worker.Options{
		Coordinator: o.coordinator, Name: o.name, Advertise: o.advertise,
		Capacity: o.capacityFor(), DrainTimeout: o.drain, TaskRunScan: o.taskRunScan, Logger: log,
		DialOptions:   sec.DialOptions(tlsconfig.RoleCoordinator),
		ServerOptions: sec.ServerOptions(authz.Worker()),
	})
	if o.demo {
		demo.Register(w)
		if o.fixtures {
			demo.RegisterFixtures(w)
		}
	}
	if o.upstream.set() {
		a, err := o.upstream.adapter(w, log)
		if err != nil {
			return err
		}
		stopUpstream := startAdapter(ctx, a)
		defer stopUpstream() // after the worker drained: running calls still reach the server
	}
	if o.servers.set() {
		g, err := o.servers.group(w, log)
		if err != nil {
			return err
		}
		stopServers := startGroup(ctx, g)
		defer stopServers() // after the worker drained, as above
	}
	fmt.Fprintf(s.Stderr, "worker: %s\n", lis.Addr())
	var g errgroup.Group
	adminCtx, stopAdmin := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAdmin()
	ready, closeReady := grpcHealth(lis.Addr().String(), sec.DialOptions(tlsconfig.RoleWorker))
	defer closeReady()
	g.Go(func() error { return serveAdminReady(adminCtx, s.Stderr, adminLis.Lis, w.Registry(), ready) })
	shutdownOf(ctx).waitsFor(func() string { return callsInFlight(w.Registry(), workerInFlight, o.drain) })
	err = w.Run(ctx, lis)
	stopAdmin()
	return errors.Join(err, g.Wait())
}
