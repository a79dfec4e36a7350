package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// Options configures a coordinator replica. The zero value of every field
// but Client means its default.
type Options struct {
	// Client talks to etcd. Required.
	Client *clientv3.Client
	// Prefix of every key (default "/mcpcancel/v1/").
	Prefix string
	// Name identifies this replica in logs and Attached messages.
	Name string
	// LeaseTTL is the worker lease TTL (default 10s): a worker that is gone
	// this long has its running calls failed.
	LeaseTTL time.Duration
	// Retention is how long settled calls and audit records are kept
	// (default 24h).
	Retention time.Duration
	// DefaultTimeout applies to calls that ask for none (default 10m);
	// MaxTimeout caps what a call may ask for (default Retention/2).
	DefaultTimeout, MaxTimeout time.Duration
	// OpTimeout bounds each etcd operation (default 5s).
	OpTimeout time.Duration
	// HealthInterval is how often the replica checks that it can reach
	// etcd, for its health service (default 1s).
	HealthInterval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Tasks bounds MCP tasks (see TaskOptions).
	Tasks TaskOptions
	// BeginLinger is how long the Begin of a call placed beside its work
	// waits for the call's decision, so that a quick call costs one
	// commit (linger.go): 0 adapts it to the tool's calls and the
	// replica's commits; a positive value lingers every such Begin that
	// long (keep it to milliseconds: what a call shows its client waits
	// for its record); a negative one never lingers.
	BeginLinger time.Duration
}

// Server is one coordinator replica. It implements the gRPC
// CoordinatorService; Run must be running for it to serve.
type Server struct {
	pb.UnimplementedCoordinatorServiceServer

	opts Options
	cli  *clientv3.Client
	keys keys
	log  *slog.Logger

	view       *view
	running    *runningCalls
	retention  *retention
	begunLease *retention // Begin's: outlives the call's last possible decision
	stops      *stopBatcher
	commits    *committer
	placed     placedCalls // calls placed here whose Begin has not answered (start.go)
	quick      quickness   // how long commits and calls take: how long a Begin lingers (linger.go)
	// recordWaits holds a token per cancel waiting for a record (start.go).
	recordWaits chan struct{}
	attached    *attachments
	notes       noteWatchers
	metrics     *metrics
	health      *healthState

	schemaBehind atomic.Bool // the keyspace awaits the leader's migration

	ready  chan struct{}
	bg     group // stream receivers that outlive their handlers briefly
	leases group // workerLease goroutines, until orphaned or closed
}

var _ pb.CoordinatorServiceServer = (*Server)(nil)

// New returns a replica; it does nothing until Run.
func New(opts Options) *Server {
	if opts.Client == nil {
		panic("coordinator: Options.Client is required")
	}
	opts.setDefaults()
	s := &Server{
		opts:     opts,
		cli:      opts.Client,
		keys:     keys{opts.Prefix},
		log:      opts.Logger,
		attached: newAttachments(),
		health:   newHealthState(),
		ready:    make(chan struct{}),
	}
	s.view = newView(s)
	s.running = newRunningCalls()
	s.retention = &retention{s: s}
	// A running call's record must outlive the latest moment anyone may
	// still decide it (its deadline, then the janitor a lease TTL later),
	// by a whole retention: a record that expired first would leave the
	// call with no decision at all. The soak found this with a 10 s
	// retention and 5 s calls: a janitor delayed 4 s under load found the
	// record gone.
	s.begunLease = &retention{s: s, extra: s.opts.MaxTimeout + s.opts.LeaseTTL}
	s.stops = newStopBatcher(s)
	s.commits = newCommitter(opts.Client, opts.OpTimeout)
	s.recordWaits = make(chan struct{}, maxRecordWaits)
	s.metrics = newMetrics(s)
	s.commits.took = func(d time.Duration) {
		s.metrics.commitDuration.Observe(d.Seconds())
		s.quick.committed(d)
	}
	return s
}

// setDefaults fills in the default of every zero field.
func (o *Options) setDefaults() {
	if o.Prefix == "" {
		o.Prefix = "/mcpcancel/v1/"
	}
	if o.Name == "" {
		o.Name = "coordinator-" + randid.New(4)
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.Retention == 0 {
		o.Retention = 24 * time.Hour
	}
	if o.DefaultTimeout == 0 {
		o.DefaultTimeout = 10 * time.Minute
	}
	if o.MaxTimeout == 0 {
		o.MaxTimeout = o.Retention / 2
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = 5 * time.Second
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Tasks.setDefaults()
	o.Tasks.MaxTTL = min(o.Tasks.MaxTTL, o.MaxTimeout)
	o.Tasks.DefaultTTL = min(o.Tasks.DefaultTTL, o.Tasks.MaxTTL)
}

// Run serves until ctx is done: it keeps this replica's view of workers and
// running calls, pushes stop orders to attached workers, batches handler
// stop reports and campaigns for the janitor. It returns nil when ctx ends.
func (s *Server) Run(ctx context.Context) error {
	schemaRev, err := s.openSchema(ctx)
	if err == nil {
		err = s.view.load(ctx)
	}
	if err != nil {
		s.health.hs.Shutdown()
		return err
	}
	close(s.ready)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.watchSchema(ctx, schemaRev) })
	g.Go(func() error { return s.view.watchWorkers(ctx) })
	g.Go(func() error { return s.view.watchOwners(ctx) })
	g.Go(func() error { return s.watchNotes(ctx) })
	g.Go(func() error { return s.stops.run(ctx) })
	g.Go(func() error { return s.commits.run(ctx) })
	g.Go(func() error { return s.runJanitor(ctx) })
	g.Go(func() error { return s.runExpiry(ctx) })
	g.Go(func() error { return s.runHealth(ctx) })
	err = g.Wait()
	// Attach starts its receiver after it is attached, so once bg is
	// closed every receiver running belongs to an attachment closeAll ends;
	// a later one is refused. Then the leases: their handlers have ended
	// or are ending, orphaning them.
	s.bg.close()
	s.attached.closeAll()
	s.bg.wait()
	s.leases.wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Ready is closed once the replica has loaded its view and can serve.
func (s *Server) Ready() <-chan struct{} { return s.ready }

func (s *Server) waitReady(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// opCtx bounds one etcd operation.
func (s *Server) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.OpTimeout)
}

func (s *Server) now() time.Time { return s.opts.Now().UTC() }

// retention hands out the lease that settled records live on. Each lease
// lives Retention plus one rotation period and is never kept alive, so
// records expire on their own; a new one is granted every Retention/24.
type retention struct {
	s     *Server
	extra time.Duration // added to Retention

	mu      sync.Mutex
	id      clientv3.LeaseID
	granted time.Time
}

func (r *retention) lease(ctx context.Context) (clientv3.LeaseID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rotate := r.rotation()
	if r.id != 0 && r.s.now().Sub(r.granted) < rotate {
		return r.id, nil
	}
	ttl := int64((r.s.opts.Retention + r.extra + rotate + time.Second - 1) / time.Second)
	ctx, cancel := r.s.opCtx(ctx)
	defer cancel()
	resp, err := r.s.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, etcdErr(ctx, "grant retention lease", err)
	}
	r.id, r.granted = resp.ID, r.s.now()
	return r.id, nil
}

// forget drops a lease etcd no longer knows, so the next call grants anew.
func (r *retention) forget(id clientv3.LeaseID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id == id {
		r.id = 0
	}
}

func (r *retention) rotation() time.Duration {
	return max(r.s.opts.Retention/24, time.Second)
}
