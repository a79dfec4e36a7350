package worker

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// maxPendingStops bounds stop reports queued while detached; past it the
// oldest are dropped (they only fill in the audit's stopped_at).
const maxPendingStops = 65536

// control keeps the worker attached to a coordinator replica: it holds the
// worker's lease across reconnects, applies stop orders and sends reports.
type control struct {
	w *Worker

	mu          sync.Mutex
	stream      pb.CoordinatorService_AttachClient // nil while detached
	lease       int64
	coordinator string
	pending     []*pb.HandlerStopped
	draining    bool
	detaching   bool
	wake        chan struct{} // something to send
	attached    chan struct{} // closed on the first successful attach
	once        sync.Once
}

func newControl(w *Worker) *control {
	return &control{w: w, wake: make(chan struct{}, 1), attached: make(chan struct{})}
}

// Attached is closed once the worker has attached to a coordinator for the
// first time, so its tools can be called.
func (w *Worker) Attached() <-chan struct{} { return w.ctrl.attached }

// run attaches, and re-attaches after any failure, until ctx is done.
func (c *control) run(ctx context.Context) error {
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := c.session(ctx)
		if ctx.Err() != nil || c.isDetaching() {
			break
		}
		c.w.log.Warn("control stream ended; re-attaching", "err", err)
		if time.Since(start) > 5*time.Second {
			wait = 50 * time.Millisecond
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, 2*time.Second)
	}
	return nil
}

// session is one attached control stream.
func (c *control) session(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.w.coord.Attach(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	tools, gen := c.w.toolList()
	hello := &pb.WorkerHello{
		Name: c.w.opts.Name, Address: c.w.opts.Advertise, Tools: tools,
		Capacity: int32(c.w.opts.Capacity), LeaseId: c.lease,
	}
	c.mu.Unlock()
	if err := stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: hello}}); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	att := first.GetAttached()
	c.mu.Lock()
	had := c.lease
	c.lease = att.GetLeaseId()
	c.stream = stream
	c.coordinator = att.GetCoordinator()
	draining := c.draining
	if tools, now := c.w.toolList(); now != gen {
		// The tools changed while the hello was on its way.
		stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_ToolsChanged{ToolsChanged: &pb.ToolsChanged{Tools: tools}}})
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
		c.mu.Unlock()
	}()
	if draining {
		c.drain()
	}
	c.signal()
	done := make(chan error, 1)
	go func() { done <- c.sender(ctx, stream) }() // ends with ctx; waited below
	err = c.receive(stream)
	cancel()
	<-done
	return err
}

func (c *control) receive(stream pb.CoordinatorService_AttachClient) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if stop := m.GetStop(); stop != nil {
			c.w.stopCall(stop)
		}
	}
}

// sender sends queued stop reports while the stream lives.
func (c *control) sender(ctx context.Context, stream pb.CoordinatorService_AttachClient) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		}
		c.mu.Lock()
		batch := c.pending
		c.pending = nil
		c.mu.Unlock()
		for i, r := range batch {
			if err := c.send(stream, &pb.AttachRequest{Msg: &pb.AttachRequest_Stopped{Stopped: r}}); err != nil {
				c.requeue(batch[i:])
				return err
			}
		}
	}
}

func (c *control) send(stream pb.CoordinatorService_AttachClient, m *pb.AttachRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream != stream {
		return context.Canceled
	}
	return stream.Send(m)
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
	defer c.mu.Unlock()
	c.draining = true
	if c.stream != nil {
		c.stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Drain{Drain: &pb.Drain{}}})
	}
}

// toolsChanged re-registers the tool list if attached. The caller must
// not hold w.mu: the lock order is c.mu, then w.mu. Holding c.mu across
// the snapshot and the send keeps concurrent changes in order.
func (c *control) toolsChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream == nil {
		return // the next hello carries the tools
	}
	tools, _ := c.w.toolList()
	c.stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_ToolsChanged{ToolsChanged: &pb.ToolsChanged{Tools: tools}}})
}

// detach flushes stop reports and asks the coordinator to revoke the
// lease. It reports whether a stream was there to ask; run then returns
// when the coordinator closes it.
func (c *control) detach() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detaching = true
	if c.stream == nil {
		return false
	}
	for _, r := range c.pending {
		c.stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Stopped{Stopped: r}})
	}
	c.pending = nil
	c.stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Detach{Detach: &pb.Detach{}}})
	c.stream.CloseSend()
	return true
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
