package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/dial"
)

// maxPendingStops bounds stop reports queued while detached; past it the
// oldest are dropped (they only fill in the audit's stopped_at).
const maxPendingStops = 65536

// attachTimeout bounds the wait for the coordinator's answer to a hello.
const attachTimeout = 15 * time.Second

// silentBeats is how many heartbeat intervals may pass without a word
// from a coordinator that echoes heartbeats before its link is taken for
// half-dead.
const silentBeats = 3

var (
	errNoHelloAnswer     = errors.New("worker: no answer to the hello")
	errCoordinatorSilent = errors.New("worker: the coordinator's replies stopped arriving")
)

// control keeps the worker attached to a coordinator replica: it holds the
// worker's lease across reconnects, applies stop orders and sends reports
// and heartbeats. Decisions are made under mu; only the sender goroutine
// of a stream sends on it, outside mu.
type control struct {
	w *Worker

	mu          sync.Mutex
	stream      pb.CoordinatorService_AttachClient // nil while detached
	lease       int64
	coordinator string
	pending     []*pb.HandlerStopped // stop reports, kept across streams
	outbox      []*pb.AttachRequest  // control messages for this stream
	// completesOnStream: the stream's replica takes completions on it;
	// completing holds those sent and not yet answered, by seq.
	completesOnStream bool
	completeSeq       uint64
	completing        map[uint64]chan *pb.CompleteReply
	draining          bool
	detaching         bool
	helloWait         time.Duration // for a re-attach's hello; 0 before the first attach
	wake              chan struct{} // something to send
	// progressDirty: some call's progress changed since the last digest
	// went out; the sender sends one with its next heartbeat.
	progressDirty atomic.Bool
	// sentEmpty: the stream's last digest listed no call (or none was
	// sent), so another empty one would say nothing new. Sender's own.
	sentEmpty bool
	attached  chan struct{} // closed on the first successful attach
	once      sync.Once
}

func newControl(w *Worker) *control {
	return &control{w: w, wake: make(chan struct{}, 1), attached: make(chan struct{}), completing: map[uint64]chan *pb.CompleteReply{}}
}

// run attaches, and re-attaches after any failure, until ctx is done.
func (c *control) run(ctx context.Context) error {
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		start := time.Now()
		err := c.session(ctx)
		if ctx.Err() != nil || c.isDetaching() {
			break
		}
		c.w.log.Warn("control stream ended; re-attaching", "err", err)
		if time.Since(start) > 5*time.Second {
			retry.Reset()
		}
		retry.Wait(ctx)
	}
	return nil
}

// session is one attached control stream.
func (c *control) session(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	link := c.w.conn.Gen()
	stream, att, gen, err := c.hello(ctx, cancel)
	if errors.Is(err, errNoHelloAnswer) {
		// Nothing came back: the link may lose replies, and so would
		// every stream and settle on it.
		c.w.redial(link, err)
	}
	if err != nil {
		return err
	}
	every := heartbeatEvery(att)
	c.mu.Lock()
	c.helloWait = max(every, 500*time.Millisecond)
	had := c.lease
	c.lease = att.GetLeaseId()
	c.stream = stream
	c.coordinator = att.GetCoordinator()
	c.completesOnStream = att.GetCompletesOnStream()
	c.outbox = nil // the hello said it all
	if c.draining {
		c.outbox = append(c.outbox, &pb.AttachRequest{Msg: &pb.AttachRequest_Drain{Drain: &pb.Drain{}}})
	}
	if offer, now := c.w.offer(); now != gen {
		// The tools changed while the hello was on its way.
		c.outbox = append(c.outbox, &pb.AttachRequest{Msg: &pb.AttachRequest_ToolsChanged{ToolsChanged: offer}})
	}
	c.mu.Unlock()
	if had != 0 && !att.GetAdopted() {
		c.w.log.Warn("lease expired while detached; abandoning running calls", "old", had, "new", att.GetLeaseId())
		c.w.abandonAll()
	}
	c.w.log.Info("attached", "coordinator", att.GetCoordinator(), "lease", att.GetLeaseId(), "adopted", att.GetAdopted())
	c.once.Do(func() { close(c.attached) })
	defer func() {
		c.mu.Lock()
		c.stream = nil
		c.unansweredLocked()
		c.mu.Unlock()
	}()
	c.progressDirty.Store(true) // the new stream's replica may know none of it
	c.sentEmpty = true
	c.signal()
	silentAfter := silentBeats * every
	heard := &lastHeard{}
	heard.now()
	done := make(chan error, 1)
	go func() { // ends with ctx, or ends it; waited below
		err := c.sender(ctx, stream, every, silentAfter, heard)
		cancel() // a sender that gave up ends the Recv too
		done <- err
	}()
	err = c.receive(stream, heard)
	cancel()
	if serr := <-done; errors.Is(serr, errCoordinatorSilent) {
		err = serr
		c.w.redial(link, err)
	}
	return err
}

// helloTimeout is how long to wait for the answer to a hello: at first
// attachTimeout; on a re-attach one heartbeat interval, so a fresh
// link that loses replies is left while the lease still lives, doubling
// after each unanswered hello (a busy replica) up to attachTimeout.
func (c *control) helloTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.helloWait == 0 {
		return attachTimeout
	}
	d := c.helloWait
	c.helloWait = min(2*c.helloWait, attachTimeout)
	return d
}

// lastHeard is when the coordinator last said anything on a stream.
type lastHeard struct{ nanos atomic.Int64 }

func (h *lastHeard) now() { h.nanos.Store(time.Now().UnixNano()) }

func (h *lastHeard) since() time.Duration { return time.Since(time.Unix(0, h.nanos.Load())) }

// redial replaces the worker's connection to the coordinators, if gen is
// still the current one, after finding it half-dead. Streams and settles
// on the old one fail and are retried on the new one; the control stream
// re-attaches and adopts its lease.
func (w *Worker) redial(gen uint64, why error) {
	replaced, err := w.conn.Redial(gen)
	switch {
	case replaced:
		w.log.Warn("the link to the coordinators is half-dead; redialled", "why", why)
	case err != nil && !errors.Is(err, dial.ErrClosed):
		w.log.Error("redialling the coordinators", "err", err)
	}
}

// hello opens a control stream, says hello and waits for the answer, for
// at most helloTimeout in all: a fresh connection that loses replies
// never even completes its handshake. It returns the tool generation the
// hello carried.
func (c *control) hello(ctx context.Context, cancel context.CancelFunc) (pb.CoordinatorService_AttachClient, *pb.Attached, uint64, error) {
	wait := c.helloTimeout()
	t := time.AfterFunc(wait, cancel) // cancelling ctx ends the stream
	stream, att, gen, err := c.sayHello(ctx)
	if !t.Stop() {
		return nil, nil, 0, fmt.Errorf("%w within %v", errNoHelloAnswer, wait)
	}
	return stream, att, gen, err
}

func (c *control) sayHello(ctx context.Context) (pb.CoordinatorService_AttachClient, *pb.Attached, uint64, error) {
	stream, err := c.w.coord.Attach(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	c.mu.Lock()
	offer, gen := c.w.offer()
	hello := &pb.WorkerHello{
		Name: c.w.opts.Name, Address: c.w.opts.Advertise, Tools: offer.Tools,
		Capacity: int32(c.w.opts.Capacity), LeaseId: c.lease,
		Offers: offer.Offers, Features: offer.Features,
	}
	c.mu.Unlock()
	if err := stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: hello}}); err != nil {
		return nil, nil, 0, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, nil, 0, err
	}
	att := first.GetAttached()
	if att == nil {
		return nil, nil, 0, errors.New("worker: the coordinator did not answer the hello with Attached")
	}
	return stream, att, gen, ctx.Err()
}

// heartbeatEvery is how often to tell the coordinator the worker lives.
func heartbeatEvery(att *pb.Attached) time.Duration {
	if d := att.GetHeartbeatInterval().AsDuration(); d > 0 {
		return d
	}
	return max(att.GetLeaseTtl().AsDuration()/3, 100*time.Millisecond)
}

func (c *control) receive(stream pb.CoordinatorService_AttachClient, heard *lastHeard) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		heard.now()
		if stop := m.GetStop(); stop != nil {
			c.w.stopCall(stop)
		}
		if end := m.GetSessionEnded(); end != nil {
			c.w.sessionEnded(end.GetSession())
		}
		if r := m.GetCompleted(); r != nil {
			c.completed(r)
		}
	}
}

// sender is the one goroutine that sends on a stream: what is queued, and
// a heartbeat every interval, until ctx is done or the worker detached.
// It gives up on a stream the coordinator said nothing on for silentAfter
// (errCoordinatorSilent): the coordinator echoes heartbeats, so the link
// has lost what it sends, stop orders with it.
func (c *control) sender(ctx context.Context, stream pb.CoordinatorService_AttachClient, every, silentAfter time.Duration, heard *lastHeard) error {
	hb := time.NewTicker(every)
	defer hb.Stop()
	for {
		beat := false
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-hb.C:
			beat = true
		}
		if beat && heard.since() > silentAfter {
			return errCoordinatorSilent // what is queued waits for the next stream
		}
		msgs, stops, detach := c.takeOutgoing()
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				c.requeue(stops)
				return err
			}
		}
		for i, r := range stops {
			if err := stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Stopped{Stopped: r}}); err != nil {
				c.requeue(stops[i:])
				return err
			}
		}
		if detach {
			stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Detach{Detach: &pb.Detach{}}})
			stream.CloseSend()
			<-ctx.Done() // the coordinator closes the stream once it revoked the lease
			return nil
		}
		// Every interval, even when other messages went out: the echo of
		// each is how the worker knows its link carries replies.
		if beat {
			if err := c.sendProgress(stream, every); err != nil {
				return err
			}
			if err := stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Heartbeat{Heartbeat: &pb.Heartbeat{}}}); err != nil {
				return err
			}
		}
	}
}

// sendProgress sends a digest of the running calls' progress if any of it
// changed since the last: at most one per heartbeat interval, however
// often handlers report, so the coordinator writes at most that often.
// Only calls that have run a heartbeat interval are listed, and an empty
// digest is not repeated. A digest lost with its stream is sent again on
// the next one.
func (c *control) sendProgress(stream pb.CoordinatorService_AttachClient, every time.Duration) error {
	if !c.progressDirty.Swap(false) {
		return nil
	}
	d, younger := c.w.progressDigest(every)
	if younger {
		c.progressDirty.Store(true) // list them once they are old enough
	}
	if len(d.GetCalls()) == 0 && c.sentEmpty {
		return nil
	}
	c.sentEmpty = len(d.GetCalls()) == 0
	return stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Progress{Progress: d}})
}

// progressChanged notes that a call's progress changed, for the next
// heartbeat's digest.
func (c *control) progressChanged() { c.progressDirty.Store(true) }

// takeOutgoing takes what is queued for the stream and says whether the
// worker is detaching.
func (c *control) takeOutgoing() (msgs []*pb.AttachRequest, stops []*pb.HandlerStopped, detach bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msgs, stops = c.outbox, c.pending
	c.outbox, c.pending = nil, nil
	return msgs, stops, c.detaching
}

// queueLocked queues a control message for the current stream; while
// detached there is none, and the next hello carries the state.
func (c *control) queueLocked(m *pb.AttachRequest) {
	if c.stream != nil {
		c.outbox = append(c.outbox, m)
	}
}

func (c *control) requeue(rs []*pb.HandlerStopped) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(rs, c.pending...)
}

func (c *control) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// reportStopped tells the coordinator a settled call's handler returned.
func (c *control) reportStopped(callID string, at time.Time) {
	c.mu.Lock()
	if len(c.pending) >= maxPendingStops {
		c.pending = c.pending[1:]
	}
	c.pending = append(c.pending, &pb.HandlerStopped{CallId: callID, StoppedAt: timestamppb.New(at)})
	c.mu.Unlock()
	c.signal()
}

// drain tells the coordinator to route no new calls here.
func (c *control) drain() {
	c.mu.Lock()
	c.draining = true
	c.queueLocked(&pb.AttachRequest{Msg: &pb.AttachRequest_Drain{Drain: &pb.Drain{}}})
	c.mu.Unlock()
	c.signal()
}

// toolsChanged re-registers the tool list if attached. The caller must
// not hold w.mu: the lock order is c.mu, then w.mu. Taking the snapshot
// and queueing it under c.mu keeps concurrent changes in order.
func (c *control) toolsChanged() {
	c.mu.Lock()
	offer, _ := c.w.offer()
	c.queueLocked(&pb.AttachRequest{Msg: &pb.AttachRequest_ToolsChanged{ToolsChanged: offer}})
	c.mu.Unlock()
	c.signal()
}

// detach has the sender flush stop reports and ask the coordinator to
// revoke the lease. It reports whether a stream was there to ask; run then
// returns when the coordinator closes it.
func (c *control) detach() bool {
	c.mu.Lock()
	c.detaching = true
	attached := c.stream != nil
	c.mu.Unlock()
	c.signal()
	return attached
}

func (c *control) isDetaching() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detaching
}

// Status is what a worker knows of its attachment.
type Status struct {
	// Coordinator names the replica holding the control stream; empty while
	// detached.
	Coordinator string
	// Lease is the worker's etcd lease, kept across re-attaches while it
	// lives.
	Lease int64
}

// Status reports the worker's attachment.
func (w *Worker) Status() Status {
	c := w.ctrl
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{Lease: c.lease}
	if c.stream != nil {
		st.Coordinator = c.coordinator
	}
	return st
}
