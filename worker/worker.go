package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/grpcserver"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// detachTimeout bounds the wait for the coordinator to revoke the lease.
const detachTimeout = 5 * time.Second

// Options configures a worker. The zero value of every field but
// Coordinator means its default.
type Options struct {
	// Coordinator is the coordinator target: "host:port", "dns:///name:port"
	// or a comma-separated list of replicas. Required.
	Coordinator string
	// Name must be unique among live workers (default: hostname plus a
	// random suffix).
	Name string
	// Advertise is the host:port gateways dial for Execute (default: the
	// listener's address).
	Advertise string
	// Capacity caps concurrent calls; 0 means no cap.
	Capacity int
	// DrainTimeout bounds how long shutdown waits for running handlers
	// before cancelling them (default 30s).
	DrainTimeout time.Duration
	// TaskRunScan is how often the worker asks the coordinator for runs of
	// its tasks that no gateway opened, to start them itself (default 5s;
	// taskruns.go).
	TaskRunScan time.Duration
	// MaxParked caps the calls parked here for a 2026-07-28 client's
	// retry (park.go); default 1024. ParkTTL bounds how long one waits
	// (default 60s); a gateway may ask for less.
	MaxParked int
	ParkTTL   time.Duration
	// DialOptions and ServerOptions add to the gRPC defaults (plaintext).
	DialOptions   []grpc.DialOption
	ServerOptions []grpc.ServerOption
	// Logger; nil discards.
	Logger *slog.Logger
}

// Tool describes a tool in MCP's terms.
type Tool struct {
	Name        string
	Title       string
	Description string
	// InputSchema is the JSON Schema of the arguments (default: any object).
	InputSchema json.RawMessage
	// OutputSchema and Annotations are optional JSON.
	OutputSchema json.RawMessage
	Annotations  json.RawMessage
	// Meta is the tool's _meta, a JSON object shown to clients as it is
	// (MCP Apps' ui.resourceUri, say); optional.
	Meta json.RawMessage
	// Idempotent is the operator's word that running the tool again with
	// the same arguments has no further effect. A call lost with its worker
	// before anything of it reached the client may then be retried once,
	// on another worker.
	Idempotent bool
	// DurableBegin keeps a call of the tool from starting before its
	// record is durable: the gateway begins it first, then executes it,
	// at one commit of latency. By default a call starts beside its
	// Begin and nothing of it is shown before its record is durable, so
	// a call whose worker and gateway both die within that window may
	// have run with no record (DESIGN section 4). Set it for a tool whose
	// operators need a record before any side effect.
	DurableBegin bool
	// TaskSupport is MCP's execution.taskSupport: "" or TaskForbidden
	// (the tool never runs as a task), TaskOptional or TaskRequired. A
	// call that runs as a task keeps running when its gateway's stream
	// ends; see tasks.go.
	TaskSupport string
	// DeferTask says the handler itself decides when a call becomes a
	// task, with Call.StartTask, after it has its client's input: a
	// 2026-07-28 client that can take a task gets an ordinary call until
	// then. Without it such a client's call is a task from the start.
	DeferTask bool
}

// ErrUnavailable, in a handler's error chain, says the worker lost what
// runs the tool (such as an upstream server that went away) rather than
// that the tool failed. The call fails with initiator WORKER_LOST, and a
// gateway may retry an idempotent tool's call on another worker. See
// Unavailable.
var ErrUnavailable = errors.New("worker: the tool's server is unavailable")

// Unavailable returns err marked with ErrUnavailable; its text is err's.
func Unavailable(err error) error { return unavailable{err} }

type unavailable struct{ error }

func (u unavailable) Unwrap() []error { return []error{u.error, ErrUnavailable} }

// Handler runs one call. Its ctx is done when the call is cancelled, when
// its deadline passes, or when its caller is gone; a handler should return
// promptly then. Its result is delivered only if the call completes first.
// A returned error fails the call with the error's text.
type Handler func(ctx context.Context, c *Call) (*Result, error)

// Worker runs tool handlers for mcpcancel.
type Worker struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	tools    map[string]*registered
	offered  *offered // resources, templates, prompts, completions
	toolsGen uint64   // counts changes to tools and offers
	calls    map[string]*execution
	opened   map[string]time.Time // task runs opened here, until their deadline (taskruns.go)
	draining bool
	running  sync.WaitGroup // handlers
	handlers atomic.Int64   // handlers that have not returned (metrics)

	ctrl     *control
	hooks    sessionHooks
	elicited elicitations // URL elicitations' sessions, for CompleteElicitation
	asks     sessionAsks  // requests toward sessions outside any call (asksession.go)
	parked   parks        // calls parked for a 2026-07-28 client's retry (park.go)
	metrics  *metrics
	conn     *dial.Conn // redialled when found half-dead (see redial)
	coord    pb.CoordinatorServiceClient
	closed   chan struct{}
	stop     context.CancelFunc
	runDone  chan struct{}
}

type registered struct {
	tool    Tool
	handler Handler
}

// service serves the WorkerService API that gateways call (Execute,
// Answer, CallersGone; execute.go, childrequests.go, callersgone.go). It is a
// type apart from Worker so that tool authors see only what they use;
// Run registers it.
type service struct {
	pb.UnimplementedWorkerServiceServer
	*Worker
}

var _ pb.WorkerServiceServer = service{}

// New returns a worker with no tools.
func New(opts Options) *Worker {
	opts.setDefaults()
	w := &Worker{
		opts:    opts,
		log:     opts.Logger.With("worker", opts.Name),
		tools:   map[string]*registered{},
		offered: newOffered(),
		calls:   map[string]*execution{},
		opened:  map[string]time.Time{},
		closed:  make(chan struct{}),
		runDone: make(chan struct{}),
	}
	w.ctrl = newControl(w)
	w.metrics = newMetrics(w)
	w.metrics.reg.MustRegister(w.parked.gauge())
	return w
}

// setDefaults fills in the default of every zero field.
func (o *Options) setDefaults() {
	if o.Name == "" {
		host, _ := os.Hostname()
		o.Name = sanitizeName(host) + "-" + randid.New(4)
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.TaskRunScan == 0 {
		o.TaskRunScan = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxParked == 0 {
		o.MaxParked = defaultParks
	}
	if o.ParkTTL == 0 {
		o.ParkTTL = defaultParkTTL
	}
}

// Ready is closed once the worker has attached to a coordinator for the
// first time, so its tools can be called.
func (w *Worker) Ready() <-chan struct{} { return w.ctrl.attached }

// Name is the worker's name.
func (w *Worker) Name() string { return w.opts.Name }

// Handle registers a tool. It panics if the tool is registered twice or has
// no name: both are programming errors.
func (w *Worker) Handle(t Tool, h Handler) {
	if t.Name == "" || h == nil {
		panic("worker: Handle needs a tool name and a handler")
	}
	if len(t.InputSchema) == 0 {
		t.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	w.mu.Lock()
	if _, dup := w.tools[t.Name]; dup {
		w.mu.Unlock()
		panic(fmt.Sprintf("worker: tool %q registered twice", t.Name))
	}
	w.tools[t.Name] = &registered{t, h}
	w.toolsGen++
	w.mu.Unlock()
	w.ctrl.toolsChanged()
}

// SetTools replaces the worker's whole tool set with tools, all run by h
// (which tells them apart by Call.Tool), and re-registers the set with the
// coordinator at once if attached. Calls already running keep their
// handler. It is for workers whose tools change at run time, such as an
// adapter fronting an MCP server whose tool list changes. It panics on a
// tool without a name, a duplicate name or a nil handler.
func (w *Worker) SetTools(tools []Tool, h Handler) {
	set := make(map[string]*registered, len(tools))
	for _, t := range tools {
		if t.Name == "" || h == nil {
			panic("worker: SetTools needs tool names and a handler")
		}
		if _, dup := set[t.Name]; dup {
			panic(fmt.Sprintf("worker: tool %q listed twice", t.Name))
		}
		if len(t.InputSchema) == 0 {
			t.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		set[t.Name] = &registered{t, h}
	}
	w.mu.Lock()
	w.tools = set
	w.toolsGen++
	w.mu.Unlock()
	w.ctrl.toolsChanged()
}

// offer returns everything the worker offers, and its generation.
func (w *Worker) offer() (*pb.ToolsChanged, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	offers, features := w.offered.proto()
	return &pb.ToolsChanged{Tools: w.toolListLocked(), Offers: offers, Features: features}, w.toolsGen
}

func (w *Worker) toolListLocked() []*pb.Tool {
	out := make([]*pb.Tool, 0, len(w.tools))
	for _, r := range w.tools {
		out = append(out, &pb.Tool{
			Name: r.tool.Name, Title: r.tool.Title, Description: r.tool.Description,
			InputSchemaJson: r.tool.InputSchema, OutputSchemaJson: r.tool.OutputSchema,
			AnnotationsJson: r.tool.Annotations, Idempotent: r.tool.Idempotent, TaskSupport: r.tool.TaskSupport,
			DeferTask: r.tool.DeferTask, MetaJson: r.tool.Meta, DurableBegin: r.tool.DurableBegin,
		})
	}
	return out
}

// Run serves Execute on lis and keeps the worker attached to a coordinator
// until ctx is done; then it drains: it takes no new calls, waits up to
// DrainTimeout for running handlers (cancelling the rest), detaches so its
// lease is revoked, and returns. Run may be called once.
func (w *Worker) Run(ctx context.Context, lis net.Listener) error {
	defer close(w.runDone)
	if w.opts.Advertise == "" {
		w.opts.Advertise = lis.Addr().String()
	}
	conn, err := dial.Open(w.opts.Coordinator, w.opts.DialOptions...)
	if err != nil {
		return err
	}
	defer conn.Close()
	w.conn = conn
	w.coord = pb.NewCoordinatorServiceClient(conn)

	srv := grpcserver.New(w.log, w.metrics.reg, grpcserver.Keepalive{}, w.opts.ServerOptions...)
	pb.RegisterWorkerServiceServer(srv, service{Worker: w})
	// Not serving (grpc.health.v1, a pod's readiness) until attached: only
	// then can the worker be given calls.
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthgrpc.RegisterHealthServer(srv, hs)

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	w.mu.Lock()
	w.stop = stop
	w.mu.Unlock()
	ctrlCtx, stopCtrl := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCtrl()
	ctrlDone := make(chan struct{})
	var g errgroup.Group
	g.Go(func() error { return srv.Serve(lis) })
	g.Go(func() error {
		defer close(ctrlDone)
		return w.ctrl.run(ctrlCtx)
	})
	g.Go(func() error {
		w.scanTaskRuns(ctx, func(run func()) { g.Go(func() error { run(); return nil }) })
		return nil
	})
	g.Go(func() error {
		select {
		case <-w.Ready():
			hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		case <-ctx.Done():
		}
		return nil
	})

	<-ctx.Done()
	hs.Shutdown() // NOT_SERVING from now on; a late SERVING from the attach watcher is ignored
	w.drain()
	if w.ctrl.detach() {
		// The coordinator ends the stream once it has revoked the lease.
		t := time.NewTimer(detachTimeout)
		select {
		case <-ctrlDone:
		case <-t.C:
			w.log.Warn("coordinator did not confirm the detach; the lease will expire on its own")
		}
		t.Stop()
	}
	stopCtrl()
	grpcserver.Stop(srv, detachTimeout) // its calls are over: what holds it is a peer that does not close
	err = g.Wait()
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// drain stops taking calls and waits for handlers, cancelling what is still
// running after DrainTimeout.
func (w *Worker) drain() {
	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
	w.parked.abandonAll(errShutdown)
	w.ctrl.drain()
	done := make(chan struct{})
	go func() { // owned here: ends when the handlers do, and we wait for it
		w.running.Wait()
		close(done)
	}()
	t := time.NewTimer(w.opts.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	w.log.Warn("drain timeout: cancelling running calls")
	w.mu.Lock()
	for _, e := range w.calls {
		e.shutdown()
	}
	w.mu.Unlock()
	<-done
}

// Close stops the worker as if Run's context ended and waits for Run to
// return. It is idempotent and safe to call concurrently.
func (w *Worker) Close() error {
	w.mu.Lock()
	stop := w.stop
	w.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	<-w.runDone
	return nil
}

func sanitizeName(s string) string {
	out := []byte{}
	for i := 0; i < len(s) && len(out) < 100; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "worker"
	}
	return string(out)
}
