package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// Begin implements CoordinatorService.Begin.
func (s *Server) Begin(ctx context.Context, req *pb.BeginRequest) (*pb.BeginResponse, error) {
	resp, err := s.begin(ctx, req)
	return resp, toStatus(err)
}

func (s *Server) begin(ctx context.Context, req *pb.BeginRequest) (*pb.BeginResponse, error) {
	if err := validateBegin(req); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	rec := s.newRecord(ctx, req)
	idx := s.keys.index(req.GetKey())
	var reuse int64 // the index revision to overwrite, when the id was used before
	var lost string // for a retry, the worker the call was lost with
	if req.GetRetryOf() != "" {
		prior, rev, err := s.retryable(ctx, req, idx)
		if err != nil {
			return nil, err
		}
		// The retry never outlives the call the client made.
		if prior.Deadline.Before(rec.Deadline) {
			rec.Deadline = prior.Deadline
		}
		rec.RetryOf, reuse, lost = prior.CallID, rev, prior.Worker
	}
	for range 5 {
		w, err := s.pick(ctx, rec, lost, req.GetPinWorker())
		if err != nil {
			return nil, err
		}
		rec.CallID, rec.Worker = randid.New(16), w.name
		fence, _, err := s.beginTxn(ctx, rec, idx, w, reuse)
		switch {
		case err == nil:
			s.begun(ctx, rec, idx, w, fence)
			return placedReply(rec, w, fence, nil), nil
		case errors.As(err, new(*indexTaken)) && lost != "":
			return nil, fmt.Errorf("%w: request id %s was used again meanwhile", ErrNotRetryable, rec.RequestID)
		case errors.As(err, new(*indexTaken)):
			if reuse, err = s.reusable(ctx, err.(*indexTaken).kv); err != nil {
				return nil, err
			}
		case errors.Is(err, errWorkerGone):
			s.view.forgetWorker(w.name, w.createRev)
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: the call could not be placed after several tries", ErrNoCapacity)
}

// newRecord is the record of the call req begins, as begun.
func (s *Server) newRecord(ctx context.Context, req *pb.BeginRequest) *callRecord {
	now := s.now()
	return &callRecord{
		Scope:       req.GetKey().GetScope(),
		Principal:   req.GetPrincipal(),
		RequestID:   client.RequestIDJSON(req.GetKey().GetRequestId()),
		Method:      callMethod(req.GetMethod()),
		Tool:        req.GetTool(),
		Gateway:     req.GetGateway(),
		State:       stateRunning,
		RequestedAt: now,
		Deadline:    now.Add(s.timeout(req)),
		TraceID:     telemetry.TraceID(ctx),
		BeginID:     req.GetBeginId(),
	}
}

// pick chooses a live worker for rec, never lost; pin, when set, is the
// only worker it may choose.
func (s *Server) pick(ctx context.Context, rec *callRecord, lost, pin string) (*workerEntry, error) {
	if pin != "" {
		return s.view.pinned(rec.Method, rec.Tool, pin)
	}
	w, err := s.view.pick(rec.Method, rec.Tool, lost)
	if errors.Is(err, ErrUnknownTool) {
		// A worker that just attached, perhaps to another replica, may
		// not have reached this replica's watch yet: look once more.
		if err = s.view.refreshWorkers(ctx); err == nil {
			w, err = s.view.pick(rec.Method, rec.Tool, lost)
		}
	}
	return w, err
}

// begun notes a call whose Begin committed at fence, still running.
func (s *Server) begun(ctx context.Context, rec *callRecord, idx string, w *workerEntry, fence int64) {
	s.view.addOwner(w.name, rec.CallID)
	s.running.add(rec, idx, fence)
	tracePlacement(ctx, rec)
}

// placedReply tells the caller where rec runs: fence 0 with its
// placement while the record is being written beside the work.
func placedReply(rec *callRecord, w *workerEntry, fence int64, placement []byte) *pb.BeginResponse {
	return &pb.BeginResponse{
		CallId: rec.CallID, Fence: fence, Worker: w.name,
		WorkerAddress: w.info.Address, Deadline: timestamppb.New(rec.Deadline),
		Timeout:    durationpb.New(rec.Deadline.Sub(rec.RequestedAt)),
		Idempotent: idempotent(w, rec),
		Placement:  placement,
	}
}

// retryable checks that req may retry the call it names: the call its key
// names now, failed because its worker was lost, not a retry itself, and
// not past its deadline. It returns that call and the index revision the
// retry replaces, so that a retry placed twice at once commits only once.
func (s *Server) retryable(ctx context.Context, req *pb.BeginRequest, idx string) (*callRecord, int64, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(idx), clientv3.OpGet(s.keys.call(req.GetRetryOf()))).Commit()
	if err != nil {
		return nil, 0, etcdErr(ctx, "read the call to retry", err)
	}
	ikv, ckv := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(ikv) == 0 || len(ckv) == 0 {
		return nil, 0, fmt.Errorf("%w: no call %s under this key", ErrNotRetryable, req.GetRetryOf())
	}
	begun, err := decode[callRecord]("index", ikv[0].Value)
	if err != nil {
		return nil, 0, err
	}
	prior, err := decode[callRecord]("call", ckv[0].Value)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case begun.CallID != prior.CallID:
		return nil, 0, fmt.Errorf("%w: call %s is not this key's latest", ErrNotRetryable, prior.CallID)
	case prior.Principal != req.GetPrincipal() || prior.Tool != req.GetTool() || prior.Method != callMethod(req.GetMethod()):
		return nil, 0, fmt.Errorf("%w: call %s was another principal's or tool's", ErrNotRetryable, prior.CallID)
	case prior.State != stateFailed:
		return nil, 0, fmt.Errorf("%w: call %s is %s; only a call failed with its worker lost is retried", ErrNotRetryable, prior.CallID, prior.State)
	case prior.Initiator != InitiatorName(pb.Initiator_INITIATOR_WORKER_LOST):
		return nil, 0, fmt.Errorf("%w: call %s failed by %s; only a call failed with its worker lost is retried", ErrNotRetryable, prior.CallID, prior.Initiator)
	case prior.RetryOf != "":
		return nil, 0, fmt.Errorf("%w: call %s is already a retry", ErrNotRetryable, prior.CallID)
	case !prior.Deadline.After(s.now()):
		return nil, 0, fmt.Errorf("%w: call %s is past its deadline", ErrNotRetryable, prior.CallID)
	}
	return prior, ikv[0].ModRevision, nil
}

func validateBegin(req *pb.BeginRequest) error {
	if err := validateCallKey(req.GetKey()); err != nil {
		return err
	}
	if err := validateMethodTarget(req.GetMethod(), req.GetTool()); err != nil {
		return err
	}
	if len(req.GetPrincipal()) > MaxNameBytes*2 || len(req.GetGateway()) > MaxNameBytes {
		return invalid("principal or gateway name too long")
	}
	if req.GetTimeout() != nil && req.GetTimeout().AsDuration() < 0 {
		return invalid("timeout must not be negative")
	}
	if req.GetPinWorker() != "" && req.GetRetryOf() != "" {
		return invalid("a retry of a lost call is placed on another worker: pin_worker and retry_of exclude each other")
	}
	if id := req.GetRetryOf(); id != "" && !validCallID(id) {
		return invalid("retry_of is not a call id")
	}
	if id := req.GetBeginId(); id != "" && !validCallID(id) {
		return invalid("begin_id must be 32 hex digits")
	}
	return nil
}

// callMethod is the method a record stores: tools/call is left empty, as
// in the records written before methods were recorded.
func callMethod(m string) string {
	if m == methodToolsCall {
		return ""
	}
	return m
}

// idempotent says whether the worker vouches that the call may run again.
func idempotent(w *workerEntry, rec *callRecord) bool {
	_, ok := w.serves(rec.Method, rec.Tool)
	return ok
}

func (s *Server) timeout(req *pb.BeginRequest) time.Duration {
	d := req.GetTimeout().AsDuration()
	if d <= 0 {
		d = s.opts.DefaultTimeout
	}
	return min(d, s.opts.MaxTimeout)
}

var errWorkerGone = errors.New("coordinator: picked worker is gone")

type indexTaken struct{ kv *mvccpb.KeyValue }

func (e *indexTaken) Error() string { return "coordinator: request id already used in this scope" }

// beginTxn creates the call record, the index entry and the owner key in one
// transaction, if the worker is still the one we saw and the index entry is
// free (or still the settled call we are replacing). It returns the fence,
// or settled: a decision made beside the work (Start) created the record
// first, and the Begin wrote nothing.
func (s *Server) beginTxn(ctx context.Context, rec *callRecord, idx string, w *workerEntry, reuse int64) (fence int64, settled bool, err error) {
	lease, err := s.begunLease.lease(ctx)
	if err != nil {
		return 0, false, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	wk := s.keys.worker(w.name)
	closed := s.keys.sessionClosed(rec.Scope)
	ck := s.keys.call(rec.CallID)
	begun := encode(rec)
	guards := []clientv3.Cmp{
		// First: a decision may have created the record already.
		clientv3.Compare(clientv3.CreateRevision(ck), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(wk), "=", w.createRev),
		clientv3.Compare(clientv3.ModRevision(idx), "=", reuse),
		// A session closed on another replica takes no new calls.
		clientv3.Compare(clientv3.CreateRevision(closed), "=", 0),
	}
	orElse := []clientv3.Op{
		clientv3.OpGet(ck, clientv3.WithKeysOnly()),
		clientv3.OpGet(wk, clientv3.WithKeysOnly()),
		clientv3.OpGet(idx),
		clientv3.OpGet(closed, clientv3.WithKeysOnly()),
	}
	if rec.BeginID != "" {
		// Its caller may give up on it (AbandonBegin): then it commits
		// nothing, however late it reaches etcd.
		abandoned := s.keys.abandoned(rec.BeginID)
		guards = append(guards, clientv3.Compare(clientv3.CreateRevision(abandoned), "=", 0))
		orElse = append(orElse, clientv3.OpGet(abandoned, clientv3.WithKeysOnly()))
	}
	resp, err := s.commits.Txn(ctx).If(guards...).Then( // with concurrent calls' decisions
		clientv3.OpPut(ck, begun, clientv3.WithLease(lease)),
		// The index holds the record as begun, so a cancel resolves it
		// in one read; the fence (its revision) proves it still current.
		clientv3.OpPut(idx, begun, clientv3.WithLease(lease)),
		clientv3.OpPut(s.keys.runningOf(rec), begun, clientv3.WithLease(lease)),
		clientv3.OpPut(s.keys.owner(w.name, rec.CallID), ""),
	).Else(orElse...).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.begunLease.forget(lease)
		}
		return 0, false, etcdErr(ctx, "begin", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, false, nil
	}
	got := func(i int) []*mvccpb.KeyValue { return resp.Responses[i].GetResponseRange().Kvs }
	wkv, ikv := got(1), got(2)
	switch {
	case len(got(0)) > 0:
		return 0, true, nil
	case len(resp.Responses) > 4 && len(got(4)) > 0:
		return 0, false, fmt.Errorf("%w: begin %s", ErrAbandoned, rec.BeginID)
	case len(got(3)) > 0:
		return 0, false, fmt.Errorf("%w: scope %s", ErrSessionClosed, rec.Scope)
	case len(wkv) == 0 || wkv[0].CreateRevision != w.createRev:
		return 0, false, errWorkerGone
	case len(ikv) > 0:
		return 0, false, &indexTaken{ikv[0]}
	}
	return 0, false, errWorkerGone // index moved under us; retry
}

// reusable checks that the call an index entry points at has settled, so
// the client may reuse its request id, and returns the entry's revision.
func (s *Server) reusable(ctx context.Context, idx *mvccpb.KeyValue) (int64, error) {
	begun, err := decode[callRecord]("index", idx.Value)
	if err != nil {
		return 0, err
	}
	rec, _, err := s.getCall(ctx, begun.CallID)
	if errors.Is(err, ErrUnknownCall) {
		return idx.ModRevision, nil
	}
	if err != nil {
		return 0, err
	}
	if rec.State == stateRunning {
		return 0, ErrDuplicate
	}
	return idx.ModRevision, nil
}

// AbandonBegin implements CoordinatorService.AbandonBegin.
func (s *Server) AbandonBegin(ctx context.Context, req *pb.AbandonBeginRequest) (*pb.AbandonBeginResponse, error) {
	resp, err := s.abandonBegin(ctx, req)
	return resp, toStatus(err)
}

// abandonBegin settles the race between a Begin and its caller giving up
// on it in one transaction: it marks the Begin abandoned, which every
// later attempt of that Begin's transaction finds in its guard, and reads
// the key's index in the same revision. An index entry the Begin wrote
// means it committed first; its call is then failed as any call is, so
// that a cancellation already made stands.
func (s *Server) abandonBegin(ctx context.Context, req *pb.AbandonBeginRequest) (*pb.AbandonBeginResponse, error) {
	if err := validateCallKey(req.GetKey()); err != nil {
		return nil, err
	}
	if !validCallID(req.GetBeginId()) {
		return nil, invalid("begin_id must be 32 hex digits")
	}
	d := decision{state: stateFailed, initiator: InitiatorName(req.GetInitiator()), reason: SanitizeReason(req.GetReason()), owner: true}
	if d.initiator == "" {
		return nil, invalid("initiator is required")
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	lease, err := s.begunLease.lease(ctx) // outlives any attempt of the Begin
	if err != nil {
		return nil, err
	}
	idx := s.keys.index(req.GetKey())
	octx, cancel := s.opCtx(ctx)
	resp, err := s.cli.Txn(octx).Then(
		clientv3.OpPut(s.keys.abandoned(req.GetBeginId()), "", clientv3.WithLease(lease)),
		clientv3.OpGet(idx),
	).Commit()
	cancel()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.begunLease.forget(lease)
		}
		return nil, etcdErr(octx, "abandon begin", err)
	}
	ikv := resp.Responses[1].GetResponseRange().Kvs
	if len(ikv) == 0 {
		return &pb.AbandonBeginResponse{}, nil
	}
	begun, err := decode[callRecord]("index", ikv[0].Value)
	if err != nil {
		return nil, err
	}
	if begun.BeginID != req.GetBeginId() {
		return &pb.AbandonBeginResponse{}, nil // an earlier call under the same id
	}
	// The call key as the Begin wrote it, current only if the call still
	// runs; settle reads it back if not.
	kv := &mvccpb.KeyValue{Key: []byte(s.keys.call(begun.CallID)), CreateRevision: ikv[0].ModRevision, ModRevision: ikv[0].ModRevision}
	v, err := s.settle(ctx, begun, kv, d)
	if err != nil {
		return nil, err
	}
	who, why := v.winner()
	return &pb.AbandonBeginResponse{Begun: true, CallId: begun.CallID, Result: settleResults[v.result], WinnerInitiator: who, WinnerReason: why}, nil
}
