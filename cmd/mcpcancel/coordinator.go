package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

// ErrNoEtcd means --etcd named no endpoint.
var ErrNoEtcd = errors.New("no etcd endpoint: pass --etcd http://HOST:PORT[,...]")

const aboutCoordinator = `Runs one coordinator replica: the gRPC control plane that decides, in
etcd, whether each call completed, was cancelled or failed. Run as many
replicas as you like against the same etcd and prefix; each can serve every
request. On SIGINT or SIGTERM it stops serving gracefully.`

type coordinatorFlags struct {
	listen, etcd, prefix, name string
	embedDir                   string
	auditExport, admin         string
	leaseTTL, retention, grace time.Duration
	orphanAfter                time.Duration
	logLevel                   *slog.Level
	tls                        tlsconfig.Files
	etcdSecurity               etcdSecurity
}

func parseCoordinatorFlags(s cmdline.Streams, args []string) (*coordinatorFlags, error) {
	o := &coordinatorFlags{}
	f := cmdline.NewFlags(s, "coordinator", aboutCoordinator)
	f.StringVar(&o.listen, "listen", "127.0.0.1:7801", "`HOST:PORT` to serve gRPC on (port 0 picks a free one)")
	f.StringVar(&o.etcd, "etcd", "http://127.0.0.1:2379", "etcd client `URLs`, comma-separated")
	f.StringVar(&o.embedDir, "embed-etcd", "", "run a single-member etcd inside this process with its data in `DIR`, instead of --etcd (for trying it out)")
	f.StringVar(&o.prefix, "prefix", "/mcpcancel/v1/", "`prefix` of every etcd key")
	f.StringVar(&o.name, "name", "", "this replica's `name` in logs (default: generated)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "worker lease TTL: a worker gone this long has its calls failed")
	f.DurationVar(&o.retention, "retention", 24*time.Hour, "how long settled calls and audit records are kept")
	f.StringVar(&o.auditExport, "audit-export", "", "append every new audit record, as a JSON line, to the file at `PATH` (\"-\": stdout), for log shippers; "+
		"every replica given this flag exports every record, so dedupe on (call_id, outcome)")
	f.StringVar(&o.admin, "admin", "", "`HOST:PORT` to serve /metrics on; empty serves none")
	f.DurationVar(&o.grace, "shutdown-timeout", 10*time.Second, "how long a graceful stop may take before open streams are cut")
	f.DurationVar(&o.orphanAfter, "task-orphan-after", 10*time.Second, "how long a new task's run waits for its gateway to start it before its worker may start it itself (the gateway was lost)")
	f.TLS(&o.tls)
	o.etcdSecurity.register(f)
	o.logLevel = f.LogLevel()
	f.Config()
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	return o, o.check()
}

func (o *coordinatorFlags) check() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"lease-ttl", o.leaseTTL}, {"retention", o.retention}, {"shutdown-timeout", o.grace}, {"task-orphan-after", o.orphanAfter}} {
		if d.v <= 0 {
			return cmdline.Usage(fmt.Errorf("--%s must be positive, not %v", d.flag, d.v))
		}
	}
	return nil
}

func (o *coordinatorFlags) endpoints() ([]string, error) {
	var eps []string
	for _, e := range strings.Split(o.etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, cmdline.Usage(ErrNoEtcd)
	}
	return eps, nil
}

func runCoordinator(ctx context.Context, s cmdline.Streams, args []string) error {
	o, err := parseCoordinatorFlags(s, args)
	if err != nil {
		return err
	}
	eps, err := o.endpoints()
	if err != nil {
		return err
	}
	grpcLis, adminLis := &cmdline.Addr{Flag: "listen", Addr: o.listen}, &cmdline.Addr{Flag: "admin", Addr: o.admin}
	if err := cmdline.ListenAll(grpcLis, adminLis); err != nil {
		return err
	}
	defer closeListeners(grpcLis, adminLis) // on an early return
	lis := grpcLis.Lis
	if o.embedDir != "" {
		m, err := embedetcd.Start(ctx, embedetcd.Options{Dir: o.embedDir})
		if err != nil {
			return err
		}
		defer m.Close()
		eps = []string{m.ClientURL()}
		o.etcd = m.ClientURL()
		fmt.Fprintf(s.Stderr, "etcd: %s (embedded, data in %s)\n", m.ClientURL(), o.embedDir)
	}
	etcdCfg := clientv3.Config{Endpoints: eps, Logger: zap.NewNop()}
	if o.embedDir == "" {
		if err := o.etcdSecurity.apply(&etcdCfg); err != nil {
			return err
		}
	}
	etcd, err := clientv3.New(etcdCfg)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer etcd.Close()
	export, closeExport, err := openAuditExport(s, o.auditExport)
	if err != nil {
		return err
	}
	defer closeExport()
	fmt.Fprintf(s.Stderr, "coordinator: %s\n", lis.Addr())
	log := cmdline.NewLogger(s.Stderr, *o.logLevel)
	sec, err := cmdline.LoadTLS(o.tls, log)
	if err != nil {
		return err
	}
	srv := coordinator.New(coordinator.Options{
		Client: etcd, Prefix: o.prefix, Name: o.name, LeaseTTL: o.leaseTTL, Retention: o.retention,
		Tasks: coordinator.TaskOptions{OrphanAfter: o.orphanAfter}, Logger: log,
	})
	also := []func(context.Context) error{
		func(ctx context.Context) error {
			ready, closeReady := grpcHealth(lis.Addr().String(), sec.DialOptions(tlsconfig.RoleCoordinator))
			defer closeReady()
			return serveAdminReady(ctx, s.Stderr, adminLis.Lis, srv.Registry(), ready)
		},
	}
	if export != nil {
		also = append(also, coordinator.NewExporter(srv, export).Run)
	}
	return serveCoordinator(ctx, srv, log, lis, sec.ServerOptions(authz.Coordinator()), o.grace, o.etcd, also...)
}

// serveCoordinator runs srv and its gRPC server on lis until ctx is done,
// then stops both: Run closes the workers' control streams while gRPC
// finishes the calls in flight, for at most grace. Each of also runs
// beside them, until ctx is done. sopts add to the server's options
// (transport security).
func serveCoordinator(ctx context.Context, srv *coordinator.Server, log *slog.Logger, lis net.Listener, sopts []grpc.ServerOption, grace time.Duration, etcdURLs string, also ...func(context.Context) error) error {
	gs := grpcserver.New(log, srv.Registry(), grpcserver.Keepalive{}, sopts...)
	pb.RegisterCoordinatorServiceServer(gs, srv)
	pb.RegisterAdminServiceServer(gs, coordinator.NewAdmin(srv))
	hs := srv.Health() // SERVING while the replica can decide calls
	healthgrpc.RegisterHealthServer(gs, hs)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return runReplica(ctx, srv, etcdURLs) })
	g.Go(func() error { return gs.Serve(lis) })
	for _, run := range also {
		g.Go(func() error { return run(ctx) })
	}
	g.Go(func() error {
		<-ctx.Done()
		hs.Shutdown()
		grpcserver.Stop(gs, grace)
		return nil
	})
	return g.Wait()
}

// runReplica runs srv until ctx is done. A replica that stops before it
// was ready could not read its state from etcd; one stopped by ctx while
// starting has nothing to report.
func runReplica(ctx context.Context, srv *coordinator.Server, etcdURLs string) error {
	err := srv.Run(ctx)
	select {
	case <-srv.Ready():
		return err
	default:
	}
	if err == nil || ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, coordinator.ErrSchemaTooNew) || errors.Is(err, coordinator.ErrSchemaTooOld) {
		return err // it names both versions
	}
	return fmt.Errorf("cannot read the coordinator's state from etcd at %s: %w", etcdURLs, err)
}

// openAuditExport opens where --audit-export writes: nil for nowhere,
// stdout for "-", else the file at path, appended to.
func openAuditExport(s cmdline.Streams, path string) (io.Writer, func(), error) {
	switch path {
	case "":
		return nil, func() {}, nil
	case "-":
		return s.Stdout, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, nil, fmt.Errorf("--audit-export: %w", err)
	}
	return f, func() { f.Close() }, nil
}
