package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/randid"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// ErrClosed means the gateway is shutting down.
var ErrClosed = errors.New("gateway: closed")

// Options configures a gateway. The zero value of every field but
// Coordinator means its default.
type Options struct {
	// Coordinator is the connection to the coordinators (required): the
	// gateway calls their API on it, and their gRPC health service, so
	// that /readyz means a coordinator can decide calls now (it reaches
	// etcd and its watches are open), not only that one answers. A
	// *dial.Conn is redialled when a Begin, Cancel or GetCall attempt
	// goes unanswered (coordconn.go).
	Coordinator grpc.ClientConnInterface
	// Name identifies this replica in call records (default: random).
	Name string
	// CallTimeout bounds every tool call (default 10m).
	CallTimeout time.Duration
	// StateKey seals the requestState of 2026-07-28 input_required results
	// (AES-256-GCM, 32 bytes). Replicas that serve the same clients must
	// share it; nil generates one for this process.
	StateKey []byte
	// InputTimeout is how long a client has to retry a call that needed
	// its input, before its requestState expires (default 10m).
	InputTimeout time.Duration
	// ScopeLimit caps calls in flight per scope (default 256); GlobalLimit
	// caps them per gateway (default 10000).
	ScopeLimit, GlobalLimit int
	// PingInterval, if set, makes the gateway ping clients that can hear it.
	PingInterval time.Duration
	// AllowedOrigins are the Origin header values accepted besides
	// loopback ones (DNS-rebinding protection).
	AllowedOrigins []string
	// Authenticator names the principal of each HTTP request (nil: every
	// client is "anonymous"). Unauthenticated requests get 401.
	Authenticator auth.Authenticator
	// Auth, if set, adds OAuth resource-server metadata and challenges,
	// per-tool scopes and lists, and per-principal rate limits (see
	// AuthOptions).
	Auth *AuthOptions
	// MaxMessageBytes bounds one incoming message (default 4 MiB).
	MaxMessageBytes int64
	// WriteTimeout bounds every write to a client (default 10s). A client
	// that does not take a write in time, or lets more than four messages'
	// worth of bytes queue up, is cut off, and the calls only its stream
	// could answer are cancelled as a disconnect.
	WriteTimeout time.Duration
	// ExecuteGrace is how long past a call's deadline its Execute stream
	// may last before the gateway gives up on the worker (default 15s).
	ExecuteGrace time.Duration
	// ProbeInterval is how long a call's Execute stream may be quiet
	// before the gateway asks the coordinator whether the call was decided
	// without its worker (a silent worker's call failed by the janitor);
	// default 5s. One read per quiet call per interval.
	ProbeInterval time.Duration
	// WorkerDialOptions add to the plaintext default for Execute.
	WorkerDialOptions []grpc.DialOption
	// Version is reported as serverInfo.version.
	Version string
	// Logger; nil discards.
	Logger *slog.Logger
}

// Gateway serves MCP clients.
type Gateway struct {
	opts   Options
	coord  pb.CoordinatorServiceClient
	starts starter               // whether calls start beside their Begin (beside.go)
	health healthpb.HealthClient // the coordinators' (server.go)
	log    *slog.Logger

	base     context.Context // lives until Close: calls run under it
	stop     context.CancelFunc
	inflight atomic.Int64

	tools   atomic.Pointer[[]*pb.Tool]
	offers  atomic.Pointer[catalogue] // resources, templates, prompts, features (catalogue.go)
	current sync.Once                 // the catalogue was made current for the first list (catalogue.go)
	metrics *metrics

	mu       sync.Mutex
	sessions map[*session]struct{} // live sessions that can hear notifications
	live     map[*call]struct{}    // every call in flight, for shutdown
	noCalls  chan struct{}         // closed while live is empty
	workers  map[string]*grpc.ClientConn
	closed   bool
	toolsCh  chan struct{} // closed when the tool list first arrives

	taskRuns sync.WaitGroup // the streams of tasks begun here (tasks.go)
	refusals sync.WaitGroup // session requests refused for clients (asksession.go)
	lookups  sync.WaitGroup // HTTP cancels of calls held elsewhere (cancel.go)
	gone     sync.WaitGroup // CallersGone notices on their way to workers (callersgone.go)
	prober   prober         // the quiet-stream probes, batched (probe.go)
	probes   sync.WaitGroup // its batches on their way
}

// spawn runs f on a goroutine that wg counts, for Close to wait on; a
// closed gateway runs nothing.
func (g *Gateway) spawn(wg *sync.WaitGroup, f func()) { g.spawned(wg, f) }

// spawned is spawn, reporting whether f runs.
func (g *Gateway) spawned(wg *sync.WaitGroup, f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		wg.Go(f)
	}
	return !g.closed
}

// outboxLimit is how many bytes may wait for one client stream.
func (g *Gateway) outboxLimit() int { return 4 * int(g.opts.MaxMessageBytes) }

// New returns a gateway. Run must run for it to see the tool list.
func New(opts Options) *Gateway {
	if opts.Coordinator == nil {
		panic("gateway: Options.Coordinator is required")
	}
	opts.setDefaults()
	if len(opts.StateKey) != stateKeyBytes {
		panic("gateway: Options.StateKey must be 32 bytes")
	}
	conn := opts.Coordinator
	if dc, ok := conn.(*dial.Conn); ok {
		conn = newCoordConn(dc, opts.Logger)
	}
	g := &Gateway{
		opts: opts, coord: pb.NewCoordinatorServiceClient(conn), health: healthpb.NewHealthClient(conn), log: opts.Logger,
		sessions: map[*session]struct{}{}, live: map[*call]struct{}{}, workers: map[string]*grpc.ClientConn{},
		toolsCh: make(chan struct{}), noCalls: make(chan struct{}),
	}
	close(g.noCalls)
	g.base, g.stop = context.WithCancel(context.Background())
	g.metrics = newMetrics(g)
	g.prober.g = g
	return g
}

// setDefaults fills in the default of every zero field.
func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Name == "" {
		o.Name = "gateway-" + randid.New(6)
	}
	if len(o.StateKey) == 0 {
		o.StateKey = make([]byte, stateKeyBytes)
		rand.Read(o.StateKey)
	}
	if o.InputTimeout == 0 {
		o.InputTimeout = 10 * time.Minute
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 10 * time.Minute
	}
	if o.ScopeLimit == 0 {
		o.ScopeLimit = 256
	}
	if o.GlobalLimit == 0 {
		o.GlobalLimit = 10000
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = 4 << 20
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.ExecuteGrace == 0 {
		o.ExecuteGrace = 15 * time.Second
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 5 * time.Second
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Auth != nil {
		a := *o.Auth // the caller's stays as it was
		a.setDefaults()
		o.Auth = &a
	}
}

// Run follows the coordinator's tool list and tells clients when it
// changes, until ctx is done.
func (g *Gateway) Run(ctx context.Context) error {
	notes := make(chan struct{})
	go func() { g.followNotifications(ctx); close(notes) }() // ends with ctx; waited below
	defer func() { <-notes }()
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		err := g.watchTools(ctx)
		if ctx.Err() != nil {
			break
		}
		g.log.Warn("tool watch ended; retrying", "err", err)
		retry.Wait(ctx)
	}
	return nil
}

func (g *Gateway) watchTools(ctx context.Context) error {
	stream, err := g.coord.WatchTools(ctx, &pb.WatchToolsRequest{})
	if err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		tools := m.GetTools()
		prev := g.tools.Swap(&tools)
		g.setOffers(m, prev == nil)
		if prev == nil {
			g.mu.Lock()
			select {
			case <-g.toolsCh:
			default:
				close(g.toolsCh)
			}
			g.mu.Unlock()
			continue
		}
		if !sameTools(*prev, tools) {
			g.broadcast(notifyToolsChanged)
		}
	}
}

// Ready is closed once the coordinator's tool list first arrives on the
// gateway's watch; until then each tools/list and tools/call asks the
// coordinator. (/readyz says whether calls can be decided now.)
func (g *Gateway) Ready() <-chan struct{} { return g.toolsCh }

// listTools returns the tools live workers offer, from the watched list,
// or asks the coordinator when the watch has not delivered yet.
func (g *Gateway) listTools(ctx context.Context) ([]*pb.Tool, error) {
	if t := g.tools.Load(); t != nil {
		return *t, nil
	}
	resp, err := g.coord.ListTools(ctx, &pb.ListToolsRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetTools(), nil
}

// broadcast sends a server notification to every session that can hear it.
func (g *Gateway) broadcast(msg []byte) {
	g.mu.Lock()
	var ss []*session
	for s := range g.sessions {
		ss = append(ss, s)
	}
	g.mu.Unlock()
	for _, s := range ss {
		s.notify(msg)
	}
}

func (g *Gateway) addSession(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sessions[s] = struct{}{}
}

func (g *Gateway) removeSession(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.sessions, s)
}

// track and untrack keep the set of calls in flight, whatever their
// session, so shutdown reaches them all.
func (g *Gateway) track(c *call) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	if len(g.live) == 0 {
		g.noCalls = make(chan struct{})
	}
	g.live[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(c *call) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.live[c]; !ok {
		return
	}
	delete(g.live, c)
	if len(g.live) == 0 {
		close(g.noCalls)
	}
}

// waitNoCalls waits until no call is in flight, or ctx is done.
func (g *Gateway) waitNoCalls(ctx context.Context) error {
	for {
		g.mu.Lock()
		ch := g.noCalls
		g.mu.Unlock()
		select {
		case <-ch:
			g.mu.Lock()
			n := len(g.live)
			g.mu.Unlock()
			if n == 0 {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// workerClient returns a (cached) client of the worker at addr.
func (g *Gateway) workerClient(addr string) (pb.WorkerServiceClient, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	if c := g.workers[addr]; c != nil {
		return pb.NewWorkerServiceClient(c), nil
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), dial.Keepalive{}.Option(), telemetry.DialOption()}, g.opts.WorkerDialOptions...)
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	g.workers[addr] = c
	return pb.NewWorkerServiceClient(c), nil
}

// Shutdown cancels every call still in flight (reason "shutdown"), waits
// for them to settle or for ctx, and closes worker connections. Sessions
// are not answered for the calls it cancels.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	var cs []*call
	for c := range g.live {
		cs = append(cs, c)
	}
	g.mu.Unlock()
	var eg errgroup.Group
	eg.SetLimit(64) // cancels go out together, so etcd commits them in batches
	for _, c := range cs {
		eg.Go(func() error {
			c.requestCancel(pb.Initiator_INITIATOR_SHUTDOWN, "gateway shutting down")
			return nil
		})
	}
	eg.Wait()
	err := g.waitNoCalls(ctx)
	if err != nil {
		g.stop() // cut the Execute streams of calls whose cancel did not settle
		g.waitNoCalls(context.Background())
	}
	g.stop()
	g.taskRuns.Wait() // their streams end with g.base; their tasks go on
	g.refusals.Wait() // they end with g.base
	g.lookups.Wait()  // each bounded by cancelTimeout
	g.gone.Wait()     // each bounded by callersGoneTimeout
	g.probes.Wait()   // each bounded by probeTimeout
	g.mu.Lock()
	for addr, c := range g.workers {
		c.Close()
		delete(g.workers, addr)
	}
	g.mu.Unlock()
	return err
}

// Close cancels every call in flight and waits, briefly, for them to
// settle; see Shutdown. It is idempotent.
func (g *Gateway) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	return g.Shutdown(ctx)
}
