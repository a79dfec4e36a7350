package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// MaxTools bounds the tools one worker may offer.
const MaxTools = 1024

var (
	errDetached   = errors.New("coordinator: worker detached")
	errReplaced   = errors.New("coordinator: worker attached again on another stream")
	errLeaseLost  = errors.New("coordinator: worker lease lost")
	errSlowWorker = errors.New("coordinator: worker does not read its control stream")
)

// attachment is one worker's live control stream on this replica.
type attachment struct {
	worker string
	lease  *workerLease
	out    chan *pb.AttachResponse
	cancel context.CancelCauseFunc

	mu   sync.Mutex
	info *workerInfo

	progress progressWriter // progress.go
}

// send queues a message for the worker; a worker too slow to keep up is
// disconnected and, on re-attach, re-reads its stop orders from etcd.
func (a *attachment) send(m *pb.AttachResponse) {
	select {
	case a.out <- m:
	default:
		a.cancel(errSlowWorker)
	}
}

type attachments struct {
	mu       sync.Mutex
	byWorker map[string]*attachment
}

func newAttachments() *attachments { return &attachments{byWorker: map[string]*attachment{}} }

func (as *attachments) add(a *attachment) {
	as.mu.Lock()
	prev := as.byWorker[a.worker]
	as.byWorker[a.worker] = a
	as.mu.Unlock()
	if prev != nil {
		prev.cancel(errReplaced)
	}
}

func (as *attachments) remove(a *attachment) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.byWorker[a.worker] == a {
		delete(as.byWorker, a.worker)
	}
}

func (as *attachments) get(worker string) *attachment {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.byWorker[worker]
}

func (as *attachments) closeAll() {
	as.mu.Lock()
	defer as.mu.Unlock()
	for _, a := range as.byWorker {
		a.cancel(context.Canceled)
	}
}

// pushStop tells an attached worker to stop a call settled without it.
func (s *Server) pushStop(worker, callID string, value []byte) {
	a := s.attached.get(worker)
	if a == nil {
		return
	}
	o, err := decode[stopOrder]("stop order", value)
	if err != nil {
		s.log.Error("bad stop order", "call", callID, "err", err)
		return
	}
	a.send(&pb.AttachResponse{Msg: &pb.AttachResponse_Stop{Stop: &pb.StopCall{
		CallId: callID, State: stateValues[o.State], Initiator: initiatorFromName(o.Initiator), Reason: o.Reason,
	}}})
}

// Attach implements CoordinatorService.Attach: a worker's control stream.
func (s *Server) Attach(stream pb.CoordinatorService_AttachServer) error {
	if err := s.waitReady(stream.Context()); err != nil {
		return toStatus(err)
	}
	first, err := s.firstMessage(stream)
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if err := validateHello(hello); err != nil {
		return toStatus(err)
	}
	info := &workerInfo{Name: hello.GetName(), Address: hello.GetAddress(), Tools: toolDefs(hello.GetTools()), Capacity: hello.GetCapacity(),
		Offers: offerDefs(hello.GetOffers()), Features: featuresOf(hello.GetFeatures())}
	lease, adopted, err := s.register(stream.Context(), info, clientv3.LeaseID(hello.GetLeaseId()))
	if err != nil {
		return toStatus(err)
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	wl, err := s.keepWorkerLease(lease)
	if err != nil {
		return toStatus(err) // the lease lives out its TTL
	}
	// Once the stream ends the lease lives out its TTL, for the worker to
	// re-attach and adopt it; a Detach revokes it first.
	defer wl.Orphan()
	a := &attachment{worker: info.Name, lease: wl, out: make(chan *pb.AttachResponse, 4096), cancel: cancel, info: info}
	s.attached.add(a)
	defer s.attached.remove(a)
	s.log.Info("worker attached", "worker", info.Name, "address", info.Address, "lease", int64(lease), "adopted", adopted)
	a.send(&pb.AttachResponse{Msg: &pb.AttachResponse_Attached{Attached: &pb.Attached{
		LeaseId: int64(lease), Adopted: adopted, LeaseTtl: durationpb.New(s.opts.LeaseTTL), Coordinator: s.opts.Name,
		HeartbeatInterval: durationpb.New(wl.every), CompletesOnStream: true,
	}}})
	if err := s.pushPendingStops(ctx, info.Name); err != nil {
		return toStatus(err)
	}
	// Recv cannot be interrupted: the receiver ends when the stream does,
	// right after Attach returns, so the server owns it, not this handler.
	if !s.bg.Go(func() { s.receive(ctx, stream, a) }) {
		return toStatus(errStopping)
	}
	err = s.serveAttachment(ctx, stream, a)
	cancel(err)
	return s.attachEnd(a, context.Cause(ctx))
}

// firstMessageTimeout bounds the wait for a worker's hello.
const firstMessageTimeout = 15 * time.Second

// firstMessage receives the hello, for at most firstMessageTimeout. A Recv
// cannot be interrupted, so on time-out the handler returns, which ends
// the stream and the Recv; the server owns that receiver meanwhile.
func (s *Server) firstMessage(stream pb.CoordinatorService_AttachServer) (*pb.AttachRequest, error) {
	type recv struct {
		m   *pb.AttachRequest
		err error
	}
	got := make(chan recv, 1)
	if !s.bg.Go(func() {
		m, err := stream.Recv()
		got <- recv{m, err}
	}) {
		return nil, toStatus(errStopping)
	}
	t := time.NewTimer(firstMessageTimeout)
	defer t.Stop()
	select {
	case r := <-got:
		return r.m, r.err
	case <-t.C:
		return nil, toStatus(invalid("no hello within %v", firstMessageTimeout))
	case <-stream.Context().Done():
		return nil, toStatus(stream.Context().Err())
	}
}

func (s *Server) serveAttachment(ctx context.Context, stream pb.CoordinatorService_AttachServer, a *attachment) error {
	leaseDone := a.lease.Done()
	for {
		select {
		case m := <-a.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-leaseDone:
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if err := a.lease.Err(); err != nil {
				return err
			}
			// Orphaned by a Detach, which revokes the lease next: the
			// receiver ends the stream once it has, so the worker's
			// leaving is complete when its stream ends.
			leaseDone = nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (s *Server) attachEnd(a *attachment, cause error) error {
	s.log.Info("worker stream ended", "worker", a.worker, "cause", cause)
	switch {
	case errors.Is(cause, errDetached), errors.Is(cause, io.EOF), errors.Is(cause, context.Canceled):
		return nil
	case errors.Is(cause, errLeaseLost), errors.Is(cause, errSlowWorker), errors.Is(cause, errReplaced), errors.Is(cause, errWorkerSilent):
		return toStatus(fmt.Errorf("%w: %v", ErrEtcd, cause))
	default:
		return nil
	}
}

// receive handles the worker's messages until the stream ends.
func (s *Server) receive(ctx context.Context, stream pb.CoordinatorService_AttachServer, a *attachment) {
	for {
		m, err := stream.Recv()
		if err != nil {
			a.cancel(err)
			return
		}
		a.lease.Heard()
		if err := s.handleWorkerMsg(ctx, a, m); err != nil {
			a.cancel(err)
			return
		}
	}
}

func (s *Server) handleWorkerMsg(ctx context.Context, a *attachment, m *pb.AttachRequest) error {
	switch msg := m.GetMsg().(type) {
	case *pb.AttachRequest_Stopped:
		if !validCallID(msg.Stopped.GetCallId()) || msg.Stopped.GetStoppedAt() == nil {
			return nil // a report we cannot use; ignore it rather than drop the worker
		}
		s.stops.add(ctx, stopReport{worker: a.worker, callID: msg.Stopped.GetCallId(), at: msg.Stopped.GetStoppedAt().AsTime()})
	case *pb.AttachRequest_Drain:
		return s.updateWorker(ctx, a, func(i *workerInfo) { i.Draining = true })
	case *pb.AttachRequest_ToolsChanged:
		tc := msg.ToolsChanged
		if err := validateTools(tc.GetTools()); err != nil {
			return err
		}
		if err := validateOffers(tc.GetOffers()); err != nil {
			return err
		}
		if err := validateFeatures(tc.GetFeatures()); err != nil {
			return err
		}
		return s.updateWorker(ctx, a, func(i *workerInfo) {
			i.Tools, i.Offers, i.Features = toolDefs(tc.GetTools()), offerDefs(tc.GetOffers()), featuresOf(tc.GetFeatures())
		})
	case *pb.AttachRequest_Complete:
		s.completeOnStream(ctx, a, msg.Complete)
	case *pb.AttachRequest_Progress:
		s.workerProgress(ctx, a, msg.Progress)
	case *pb.AttachRequest_Notification:
		s.workerNotification(ctx, a, msg.Notification)
	case *pb.AttachRequest_Heartbeat:
		// The echo lets the worker tell a live link from one that only
		// carries its own words: one that lost our replies (stop orders
		// with them) is given up on and redialled.
		a.send(&pb.AttachResponse{Msg: &pb.AttachResponse_Heartbeat{Heartbeat: &pb.Heartbeat{}}})
	case *pb.AttachRequest_Detach:
		if err := a.lease.Close(ctx); err != nil {
			s.log.Warn("revoking worker lease", "worker", a.worker, "err", err)
		}
		return errDetached
	}
	return nil
}

func (s *Server) updateWorker(ctx context.Context, a *attachment, change func(*workerInfo)) error {
	a.mu.Lock()
	next := *a.info
	change(&next)
	a.info = &next
	a.mu.Unlock()
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.LeaseValue(s.keys.worker(a.worker)), "=", a.lease.id),
	).Then(clientv3.OpPut(s.keys.worker(a.worker), encode(&next), clientv3.WithLease(a.lease.id))).Commit()
	if err != nil {
		return etcdErr(ctx, "update worker", err)
	}
	return nil
}

// register writes workers/<name>, adopting the worker's earlier lease if it
// is still alive, else granting a new one.
func (s *Server) register(ctx context.Context, info *workerInfo, prev clientv3.LeaseID) (clientv3.LeaseID, bool, error) {
	wk := s.keys.worker(info.Name)
	if prev != 0 {
		octx, cancel := s.opCtx(ctx)
		resp, err := s.cli.Txn(octx).If(
			clientv3.Compare(clientv3.LeaseValue(wk), "=", prev),
		).Then(clientv3.OpPut(wk, encode(info), clientv3.WithLease(prev))).Commit()
		cancel()
		if err == nil && resp.Succeeded {
			return prev, true, nil
		}
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if cur, err := s.cli.Get(octx, wk, clientv3.WithKeysOnly()); err != nil {
		return 0, false, etcdErr(octx, "register worker", err)
	} else if len(cur.Kvs) > 0 {
		return 0, false, fmt.Errorf("%w: %q", ErrWorkerNameInUse, info.Name)
	}
	g, err := s.cli.Grant(octx, int64(max(time.Second, s.opts.LeaseTTL)/time.Second))
	if err != nil {
		return 0, false, etcdErr(octx, "grant worker lease", err)
	}
	resp, err := s.cli.Txn(octx).If(
		clientv3.Compare(clientv3.CreateRevision(wk), "=", 0),
	).Then(clientv3.OpPut(wk, encode(info), clientv3.WithLease(g.ID))).Commit()
	if err == nil && resp.Succeeded {
		return g.ID, false, nil
	}
	s.cli.Revoke(octx, g.ID)
	if err != nil {
		return 0, false, etcdErr(octx, "register worker", err)
	}
	return 0, false, fmt.Errorf("%w: %q", ErrWorkerNameInUse, info.Name)
}

// pushPendingStops re-sends stop orders written while the worker was away.
func (s *Server) pushPendingStops(ctx context.Context, worker string) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, s.keys.ownersOf(worker), clientv3.WithPrefix())
	if err != nil {
		return etcdErr(octx, "read stop orders", err)
	}
	for _, kv := range resp.Kvs {
		if _, id, ok := s.keys.parseOwner(string(kv.Key)); ok && len(kv.Value) > 0 {
			s.pushStop(worker, id, kv.Value)
		}
	}
	return nil
}

func validateHello(h *pb.WorkerHello) error {
	if h == nil {
		return invalid("the first message on the stream must be a hello")
	}
	if err := validateName("worker name", h.GetName()); err != nil {
		return err
	}
	if h.GetAddress() == "" || len(h.GetAddress()) > 256 {
		return invalid("worker address must be 1 to 256 bytes")
	}
	if h.GetCapacity() < 0 {
		return invalid("capacity must not be negative")
	}
	if err := validateTools(h.GetTools()); err != nil {
		return err
	}
	if err := validateOffers(h.GetOffers()); err != nil {
		return err
	}
	return validateFeatures(h.GetFeatures())
}

func validateTools(tools []*pb.Tool) error {
	if len(tools) > MaxTools {
		return invalid("a worker may offer at most %d tools", MaxTools)
	}
	seen := map[string]bool{}
	for _, t := range tools {
		if err := validateToolName(t.GetName()); err != nil {
			return err
		}
		if seen[t.GetName()] {
			return invalid("tool %q offered twice", t.GetName())
		}
		seen[t.GetName()] = true
	}
	return nil
}
