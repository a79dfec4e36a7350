package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// Parking: a handler whose work must run once per call (a fronted
// server's tool, whose server waits on its request toward the client)
// cannot be run again with the answers, as native handlers are for a
// 2026-07-28 client's multi round-trip. Such a handler says so with
// Call.OnPark. When the gateway answers the call input_required, it asks
// the worker to park the call (Park): the worker detaches the handler's
// work from the call (the hook), the call's pending requests return
// ErrParked, and the work waits, bounded, under an unguessable park id
// that the gateway seals into its requestState. The client's retry,
// pinned to this worker, resumes it (ExecuteRequest.resume): its handler
// finds the work in Call.Resumed and carries on under the new call, whose
// input responses answer what the work asked. A park not resumed within
// its bound, or left when the worker drains, is abandoned: its work is
// told to end (Parked.Abandon), exactly once.

// Errors of parking.
var (
	// ErrParked is what a request toward the client returns when its call
	// was parked: the client answers it in a later call, which resumes
	// the work (Call.Resumed).
	ErrParked = errors.New("worker: the call was parked; the client answers in its retry")
	// ErrParkGone says a retry named a park that is no longer here: it
	// expired, was abandoned, or was never this principal's and tool's.
	// The tool is not run anew: the client calls it afresh knowingly.
	ErrParkGone = errors.New("the question this call answers expired, or the tool's server session is gone; call the tool again without requestState")
	// ErrParkExpired is the cause with which a park not resumed in time
	// is abandoned.
	ErrParkExpired = errors.New("worker: no retry resumed the parked call in time")
)

// Bounds of parking.
const (
	defaultParkTTL = 60 * time.Second
	defaultParks   = 1024
)

// Parked is a handler's work kept past its call by Call.OnPark.
type Parked interface {
	// Abandon ends the work: no retry resumed it in time, or the worker
	// is draining. It is called at most once, never after the work was
	// resumed.
	Abandon(cause error)
}

// OnPark says that the handler's work outlives the call when the call is
// parked: park is called, once per park, while the gateway parks the
// call; it must detach the work from the call's context without blocking
// and return it, or false if the work can no longer be parked (it ended).
// Without OnPark a 2026-07-28 client's retry runs the handler again.
func (c *Call) OnPark(park func() (Parked, bool)) {
	if c.exec == nil {
		return
	}
	c.exec.mu.Lock()
	c.exec.park = park
	c.exec.mu.Unlock()
}

// Resumed is the work a parked call left, when this call is the client's
// retry that resumes it; nil otherwise. A handler that does not take it
// leaves it abandoned when it returns.
func (c *Call) Resumed() Parked {
	if c.exec == nil {
		return nil
	}
	c.exec.mu.Lock()
	defer c.exec.mu.Unlock()
	w := c.exec.resumed
	c.exec.resumed = nil
	return w
}

// abandonUnclaimed abandons resumed work its handler did not take.
func (e *execution) abandonUnclaimed() {
	e.mu.Lock()
	w := e.resumed
	e.resumed = nil
	e.mu.Unlock()
	if w != nil {
		w.Abandon(ErrParkGone)
	}
}

// parkable says whether the call's requests toward its client may be
// parked.
func (e *execution) parkable() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.park != nil
}

// parked is one park.
type parked struct {
	id        string
	work      Parked
	principal string
	method    string
	tool      string
	timer     *time.Timer
}

// parks are the worker's parked calls.
type parks struct {
	mu sync.Mutex
	m  map[string]*parked // guarded by mu
}

// gauge counts the parked calls.
func (ps *parks) gauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mcpcancel_worker_parked_calls",
		Help: "Calls parked on this worker: a fronted tool's work waiting for a 2026-07-28 client's retry with its answers.",
	}, func() float64 {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		return float64(len(ps.m))
	})
}

// add parks p for ttl, unless limit are parked.
func (ps *parks) add(p *parked, ttl time.Duration, limit int, log func(*parked)) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.m) >= limit {
		return false
	}
	if ps.m == nil {
		ps.m = map[string]*parked{}
	}
	ps.m[p.id] = p
	p.timer = time.AfterFunc(ttl, func() {
		if ps.take(p.id) == p {
			log(p)
			p.work.Abandon(ErrParkExpired)
		}
	})
	return true
}

// take removes a park and returns it, or nil.
func (ps *parks) take(id string) *parked {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[id]
	delete(ps.m, id)
	if p != nil {
		p.timer.Stop()
	}
	return p
}

// abandonAll abandons every park (the worker drains).
func (ps *parks) abandonAll(cause error) {
	ps.mu.Lock()
	all := ps.m
	ps.m = nil
	ps.mu.Unlock()
	for _, p := range all {
		p.timer.Stop()
		p.work.Abandon(cause)
	}
}

// Park implements WorkerService.Park.
func (w service) Park(_ context.Context, req *pb.ParkRequest) (*pb.ParkResponse, error) {
	w.mu.Lock()
	e := w.calls[req.GetCallId()]
	w.mu.Unlock()
	if e == nil || e.children.scope != req.GetScope() {
		return nil, status.Error(codes.NotFound, "the call is not running here")
	}
	e.mu.Lock()
	hook := e.park
	e.park = nil // once per call: a resumed call sets its own
	e.mu.Unlock()
	if hook == nil {
		return nil, status.Error(codes.FailedPrecondition, "the call's handler runs again with the answers; it is not parked")
	}
	ttl := w.opts.ParkTTL
	if d := req.GetTtl().AsDuration(); d > 0 {
		ttl = min(ttl, d)
	}
	if w.parked.count() >= w.opts.MaxParked {
		return nil, status.Errorf(codes.ResourceExhausted, "this worker holds its limit of %d parked calls", w.opts.MaxParked)
	}
	work, ok := hook()
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "the call's work has ended")
	}
	p := &parked{id: randid.New(16), work: work, principal: e.call.principal, method: e.call.Method, tool: e.call.Tool}
	if !w.parked.add(p, ttl, w.opts.MaxParked, w.parkExpired) {
		work.Abandon(errors.New("worker: at its limit of parked calls"))
		return nil, status.Errorf(codes.ResourceExhausted, "this worker holds its limit of %d parked calls", w.opts.MaxParked)
	}
	e.children.parkAll()
	w.log.Info("parked a call for its client's retry", "call", e.ref.CallId, "tool", p.tool, "park", p.id, "ttl", ttl)
	return &pb.ParkResponse{ParkId: p.id, Expires: timestamppb.New(time.Now().Add(ttl))}, nil
}

func (w *Worker) parkExpired(p *parked) {
	w.log.Info("a parked call was not resumed in time; its work is abandoned", "park", p.id, "tool", p.tool)
}

func (ps *parks) count() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.m)
}

// parkAll resolves every pending request of a parked call with ErrParked.
func (t *childRequests) parkAll() {
	t.mu.Lock()
	pending := t.pending
	t.pending = nil
	for seq := range pending {
		t.endLocked(seq, "parked")
	}
	t.mu.Unlock()
	for _, ch := range pending {
		ch <- clientAnswer{err: ErrParked}
	}
}

// resume takes the park a retry names, if it is the retry's principal's
// and target's.
func (w *Worker) resume(req *pb.ExecuteRequest) Parked {
	p := w.parked.take(req.GetResume())
	if p == nil {
		return nil
	}
	if p.principal != req.GetPrincipal() || p.method != methodOf(req) || p.tool != req.GetTool() {
		// Not for this call: the gateway's sealed state binds both, so
		// this is no client's doing. The work is abandoned all the same,
		// as its park was revealed.
		p.work.Abandon(ErrParkGone)
		return nil
	}
	return p.work
}

// parkGone is the handler of a retry whose park is gone.
func parkGone(context.Context, *Call) (*answer, error) { return nil, ErrParkGone }
