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
	now := s.now()
	rec := &callRecord{
		Scope:       req.GetKey().GetScope(),
		Principal:   req.GetPrincipal(),
		RequestID:   client.RequestIDJSON(req.GetKey().GetRequestId()),
		Tool:        req.GetTool(),
		Gateway:     req.GetGateway(),
		State:       stateRunning,
		RequestedAt: now,
		Deadline:    now.Add(s.timeout(req)),
	}
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
		w, err := s.view.pick(rec.Tool, lost)
		if errors.Is(err, ErrUnknownTool) {
			// A worker that just attached, perhaps to another replica, may
			// not have reached this replica's watch yet: look once more.
			if err = s.view.refreshWorkers(ctx); err == nil {
				w, err = s.view.pick(rec.Tool, lost)
			}
		}
		if err != nil {
			return nil, err
		}
		rec.CallID, rec.Worker = randomID(), w.name
		fence, err := s.beginTxn(ctx, rec, idx, w, reuse)
		switch {
		case err == nil:
			s.view.addOwner(w.name, rec.CallID)
			s.running.add(rec, idx, fence)
			return &pb.BeginResponse{
				CallId: rec.CallID, Fence: fence, Worker: w.name,
				WorkerAddress: w.info.Address, Deadline: timestamppb.New(rec.Deadline),
				Timeout:    durationpb.New(rec.Deadline.Sub(rec.RequestedAt)),
				Idempotent: w.tools[rec.Tool].Idempotent,
			}, nil
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
	case prior.Principal != req.GetPrincipal() || prior.Tool != req.GetTool():
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
	if err := validateToolName(req.GetTool()); err != nil {
		return err
	}
	if len(req.GetPrincipal()) > MaxNameBytes*2 || len(req.GetGateway()) > MaxNameBytes {
		return invalid("principal or gateway name too long")
	}
	if req.GetTimeout() != nil && req.GetTimeout().AsDuration() < 0 {
		return invalid("timeout must not be negative")
	}
	if id := req.GetRetryOf(); id != "" && !validCallID(id) {
		return invalid("retry_of is not a call id")
	}
	return nil
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
// free (or still the settled call we are replacing). It returns the fence.
func (s *Server) beginTxn(ctx context.Context, rec *callRecord, idx string, w *workerEntry, reuse int64) (int64, error) {
	lease, err := s.retention.lease(ctx)
	if err != nil {
		return 0, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	wk := s.keys.worker(w.name)
	closed := s.keys.sessionClosed(rec.Scope)
	begun := encode(rec)
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(wk), "=", w.createRev),
		clientv3.Compare(clientv3.ModRevision(idx), "=", reuse),
		// A session closed on another replica takes no new calls.
		clientv3.Compare(clientv3.CreateRevision(closed), "=", 0),
	).Then(
		clientv3.OpPut(s.keys.call(rec.CallID), begun, clientv3.WithLease(lease)),
		// The index holds the record as begun, so a cancel resolves it
		// in one read; the fence (its revision) proves it still current.
		clientv3.OpPut(idx, begun, clientv3.WithLease(lease)),
		clientv3.OpPut(s.keys.runningOf(rec), begun, clientv3.WithLease(lease)),
		clientv3.OpPut(s.keys.owner(w.name, rec.CallID), ""),
	).Else(
		clientv3.OpGet(wk, clientv3.WithKeysOnly()),
		clientv3.OpGet(idx),
		clientv3.OpGet(closed, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.retention.forget(lease)
		}
		return 0, etcdErr(ctx, "begin", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	wkv, ikv := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(resp.Responses[2].GetResponseRange().Kvs) > 0 {
		return 0, fmt.Errorf("%w: scope %s", ErrSessionClosed, rec.Scope)
	}
	if len(wkv) == 0 || wkv[0].CreateRevision != w.createRev {
		return 0, errWorkerGone
	}
	if len(ikv) > 0 {
		return 0, &indexTaken{ikv[0]}
	}
	return 0, errWorkerGone // index moved under us; retry
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

// getCall reads a call record (linearizably, unless opts say otherwise)
// and returns it with its kv.
func (s *Server) getCall(ctx context.Context, id string, opts ...clientv3.OpOption) (*callRecord, *mvccpb.KeyValue, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keys.call(id), opts...)
	if err != nil {
		return nil, nil, etcdErr(ctx, "get call", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, ErrUnknownCall
	}
	rec, err := decode[callRecord]("call", resp.Kvs[0].Value)
	return rec, resp.Kvs[0], err
}

// resolve finds the call a client names in its scope, in one read. It
// returns the record as begun, with a version of the call key that is
// current only if the call is still running; settle finds out which.
func (s *Server) resolve(ctx context.Context, key *pb.CallKey, opts ...clientv3.OpOption) (*callRecord, *mvccpb.KeyValue, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keys.index(key), opts...)
	if err != nil {
		return nil, nil, etcdErr(ctx, "resolve", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, ErrUnknownCall
	}
	idx := resp.Kvs[0]
	rec, err := decode[callRecord]("index", idx.Value)
	if err != nil {
		return nil, nil, err
	}
	return rec, &mvccpb.KeyValue{Key: []byte(s.keys.call(rec.CallID)), CreateRevision: idx.ModRevision, ModRevision: idx.ModRevision}, nil
}

// resolveRunning finds a running call in the scope's running set, by one
// serializable read. A member that lags may still list a call that has
// settled; the decision's guard finds that out.
func (s *Server) resolveRunning(ctx context.Context, key *pb.CallKey) (*callRecord, *mvccpb.KeyValue, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keys.running(key), clientv3.WithSerializable())
	if err != nil {
		return nil, nil, etcdErr(ctx, "resolve", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, ErrUnknownCall
	}
	return s.asBegun(resp.Kvs[0])
}

// asBegun is the call of a running-set entry, with the version of the call
// key it had when begun.
func (s *Server) asBegun(kv *mvccpb.KeyValue) (*callRecord, *mvccpb.KeyValue, error) {
	rec, err := decode[callRecord]("running", kv.Value)
	if err != nil {
		return nil, nil, err
	}
	fence := kv.CreateRevision
	return rec, &mvccpb.KeyValue{Key: []byte(s.keys.call(rec.CallID)), CreateRevision: fence, ModRevision: fence}, nil
}

// resolveNow finds the call under key linearizably: the running call, if
// there is one, else the latest call under the key, as it is now.
func (s *Server) resolveNow(ctx context.Context, key *pb.CallKey) (*callRecord, *mvccpb.KeyValue, error) {
	octx, cancel := s.opCtx(ctx)
	resp, err := s.cli.Txn(octx).Then(clientv3.OpGet(s.keys.running(key)), clientv3.OpGet(s.keys.index(key))).Commit()
	cancel()
	if err != nil {
		return nil, nil, etcdErr(octx, "resolve", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return s.asBegun(kvs[0])
	}
	ikv := resp.Responses[1].GetResponseRange().Kvs
	if len(ikv) == 0 {
		return nil, nil, ErrUnknownCall
	}
	begun, err := decode[callRecord]("index", ikv[0].Value)
	if err != nil {
		return nil, nil, err
	}
	return s.getCall(ctx, begun.CallID)
}

// Cancel implements CoordinatorService.Cancel.
func (s *Server) Cancel(ctx context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	resp, err := s.cancel(ctx, req)
	if err == nil {
		s.metrics.cancels.WithLabelValues(cancelResultLabel(resp.GetResult())).Inc()
	}
	return resp, toStatus(err)
}

func cancelResultLabel(r pb.CancelResult) string { return cancelResultNames[r] }

func (s *Server) cancel(ctx context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	d := decision{
		state:     stateCancelled,
		initiator: InitiatorName(req.GetInitiator()),
		reason:    SanitizeReason(req.GetReason()),
	}
	if d.initiator == "" {
		return nil, invalid("initiator is required")
	}
	switch t := req.GetTarget().(type) {
	case *pb.CancelRequest_Key:
		return s.cancelKey(ctx, t.Key, req.GetPrincipal(), d)
	case *pb.CancelRequest_Call:
		rec, kv, err := s.ownedCall(ctx, t.Call)
		if errors.Is(err, ErrUnknownCall) {
			return &pb.CancelResponse{Result: pb.CancelResult_CANCEL_RESULT_UNKNOWN}, nil
		}
		if err != nil {
			return nil, err
		}
		d.stoppedAt = optTime(req.GetStoppedAt())
		d.owner = true
		v, err := s.settle(ctx, rec, kv, d)
		if err != nil {
			return nil, err
		}
		return cancelReply(v, rec.CallID), nil
	default:
		return nil, invalid("cancel needs a key or a call")
	}
}

// cancelKey cancels the call a client names. The common case, a cancel for
// a running call, costs one transaction: the call is found in this
// replica's cache of calls it began, or else by one serializable read, and
// the transaction's fence check makes a stale guess harmless. Anything
// else is re-read linearizably before it is answered, so a lagging member
// or a stale cache can neither hide a call nor pass off an earlier call
// that used the same id.
func (s *Server) cancelKey(ctx context.Context, key *pb.CallKey, principal string, d decision) (*pb.CancelResponse, error) {
	if err := validateCallKey(key); err != nil {
		return nil, err
	}
	v, id, err := s.cancelResolved(ctx, key, principal, d, true)
	if err == nil && v.result == won {
		return cancelReply(v, id), nil
	}
	if err != nil && !errors.Is(err, ErrUnknownCall) {
		return nil, err
	}
	d.late = true
	v, id, err = s.cancelResolved(ctx, key, principal, d, false)
	if errors.Is(err, ErrUnknownCall) {
		return &pb.CancelResponse{Result: pb.CancelResult_CANCEL_RESULT_UNKNOWN}, nil
	}
	if err != nil {
		return nil, err
	}
	return cancelReply(v, id), nil
}

// cancelReply answers a cancel, naming the decision that won if it lost.
func cancelReply(v verdict, id string) *pb.CancelResponse {
	who, why := v.winner()
	return &pb.CancelResponse{Result: cancelResults[v.result], CallId: id, WinnerInitiator: who, WinnerReason: why}
}

// cancelResolved finds the call under key and settles it. A guess takes
// the cached record or a serializable read of the running set; otherwise
// the reads are linearizable, and a call found settled costs no
// transaction unless its cancel_lost record is due.
func (s *Server) cancelResolved(ctx context.Context, key *pb.CallKey, principal string, d decision, guess bool) (verdict, string, error) {
	var rec *callRecord
	var kv *mvccpb.KeyValue
	var err error
	c, cached := s.running.byKey(s.keys.index(key))
	switch {
	case guess && cached:
		rec, kv = c.rec, c.kv(s.keys)
	case guess:
		rec, kv, err = s.resolveRunning(ctx, key)
	default:
		rec, kv, err = s.resolveNow(ctx, key)
	}
	if err != nil {
		return verdict{}, "", err
	}
	if (principal != "" && rec.Principal != principal) || rec.Scope != key.GetScope() {
		return verdict{}, "", ErrUnknownCall // another principal's call is not in this caller's reach
	}
	v, err := s.settle(ctx, rec, kv, d)
	return v, rec.CallID, err
}

var cancelResults = map[settled]pb.CancelResult{
	won:              pb.CancelResult_CANCEL_RESULT_CANCELLED,
	alreadyCompleted: pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED,
	alreadyFailed:    pb.CancelResult_CANCEL_RESULT_ALREADY_FAILED,
	alreadyCancelled: pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED,
}

var settleResults = map[settled]pb.SettleResult{
	won:              pb.SettleResult_SETTLE_RESULT_WON,
	alreadyCompleted: pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED,
	alreadyFailed:    pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED,
	alreadyCancelled: pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED,
}

// ownedCall finds the call a worker or gateway names by id and fence: in
// the cache of calls this replica began, or else in etcd.
func (s *Server) ownedCall(ctx context.Context, ref *pb.CallRef) (*callRecord, *mvccpb.KeyValue, error) {
	if !validCallID(ref.GetCallId()) {
		return nil, nil, invalid("call id must be 32 hex digits")
	}
	if ref.GetWorker() == "" {
		return nil, nil, invalid("a call reference must name the call's worker")
	}
	if c, ok := s.running.call(ref.GetCallId(), ref.GetFence()); ok && ref.GetWorker() == c.rec.Worker {
		return c.rec, c.kv(s.keys), nil // settle's guard checks it is current
	}
	// A serializable read is enough unless it finds nothing: a settled
	// state is final, the fence and worker never change, and a running
	// state is checked by settle's guard.
	rec, kv, err := s.getCall(ctx, ref.GetCallId(), clientv3.WithSerializable())
	if errors.Is(err, ErrUnknownCall) {
		rec, kv, err = s.getCall(ctx, ref.GetCallId())
	}
	if err != nil {
		return nil, nil, err
	}
	if kv.CreateRevision != ref.GetFence() {
		return nil, nil, fmt.Errorf("%w: call %s has fence %d, not %d", ErrFenceMismatch, rec.CallID, kv.CreateRevision, ref.GetFence())
	}
	if ref.GetWorker() != rec.Worker {
		return nil, nil, fmt.Errorf("%w: call %s runs on %s", ErrNotOwner, rec.CallID, rec.Worker)
	}
	return rec, kv, nil
}

// Complete implements CoordinatorService.Complete.
func (s *Server) Complete(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	rec, kv, err := s.ownedCall(ctx, req.GetCall())
	if err != nil {
		return nil, toStatus(err)
	}
	stopped := optTime(req.GetStoppedAt())
	if stopped == nil {
		t := s.now()
		stopped = &t
	}
	v, err := s.settle(ctx, rec, kv, decision{state: stateCompleted, stoppedAt: stopped, owner: true, toolError: req.GetToolError()})
	if err != nil {
		return nil, toStatus(err)
	}
	who, why := v.winner()
	return &pb.CompleteResponse{Result: settleResults[v.result], WinnerInitiator: who, WinnerReason: why}, nil
}

// Fail implements CoordinatorService.Fail.
func (s *Server) Fail(ctx context.Context, req *pb.FailRequest) (*pb.FailResponse, error) {
	d := decision{
		state:     stateFailed,
		initiator: InitiatorName(req.GetInitiator()),
		reason:    SanitizeReason(req.GetReason()),
		stoppedAt: optTime(req.GetStoppedAt()),
		owner:     true,
	}
	if d.initiator == "" {
		return nil, toStatus(invalid("initiator is required"))
	}
	rec, kv, err := s.ownedCall(ctx, req.GetCall())
	if err != nil {
		return nil, toStatus(err)
	}
	v, err := s.settle(ctx, rec, kv, d)
	if err != nil {
		return nil, toStatus(err)
	}
	who, why := v.winner()
	return &pb.FailResponse{Result: settleResults[v.result], WinnerInitiator: who, WinnerReason: why}, nil
}

// decision is one attempt to move a call out of RUNNING.
type decision struct {
	state     string // completed, cancelled or failed
	initiator string
	reason    string
	// stoppedAt is when the handler returned, if it has: the owner key is
	// then deleted; otherwise it becomes a stop order for the worker.
	stoppedAt *time.Time
	// ownerGone says the worker is gone: drop the owner key and leave
	// stopped_at unknown.
	ownerGone bool
	// late says a client's cancellation that loses is audited once as
	// cancel_lost.
	late bool
	// toolError says a completion carries the tool's own error result: it
	// is audited as tool_error.
	toolError bool
	// owner says the call's own worker (or gateway, by call reference)
	// decides: the same decision found already made is its own earlier
	// attempt, whose reply was lost after it committed.
	owner bool
}

// outcome is the audit outcome of d: its state, or tool_error for a
// completion with the tool's own error result.
func (d decision) outcome() string {
	if d.state == stateCompleted && d.toolError {
		return outcomeToolError
	}
	return d.state
}

// madeBy says whether rec was settled by d: d's earlier attempt.
func (d decision) madeBy(rec *callRecord) bool {
	return d.owner && rec.State == d.state && rec.Initiator == d.initiator && rec.Reason == d.reason
}

// verdict is what settle decided: won, or lost to the decision in by.
type verdict struct {
	result settled
	by     *callRecord // the call as settled, when the decision lost
}

// winner names who decided a call that d lost to cancellation or failure.
func (v verdict) winner() (pb.Initiator, string) {
	if v.by == nil || v.result == won || v.result == alreadyCompleted {
		return pb.Initiator_INITIATOR_UNSPECIFIED, ""
	}
	return initiatorFromName(v.by.Initiator), v.by.Reason
}

type settled int

const (
	won settled = iota
	alreadyCompleted
	alreadyFailed
	alreadyCancelled
)

var lostTo = map[string]settled{
	stateCompleted: alreadyCompleted,
	stateFailed:    alreadyFailed,
	stateCancelled: alreadyCancelled,
}

// settle moves a running call to d.state in one transaction guarded by the
// fence, writing the audit record in the same transaction. If another
// decision got there first it reports which, and for a client's late
// cancellation writes the one cancel_lost record. An owner's decision
// found already made is its own retried one, and won.
func (s *Server) settle(ctx context.Context, rec *callRecord, kv *mvccpb.KeyValue, d decision) (verdict, error) {
	for range 3 {
		if rec.State != stateRunning {
			if d.madeBy(rec) {
				return verdict{result: won}, nil
			}
			if d.late && rec.State != stateCancelled && !rec.CancelLost {
				if err := s.recordLost(ctx, rec, kv, d); err != nil {
					return verdict{}, err
				}
			}
			return verdict{result: lostTo[rec.State], by: rec}, nil
		}
		cur, err := s.settleTxn(ctx, rec, kv, d)
		if err != nil || cur == nil {
			return verdict{result: won}, err
		}
		if rec, err = decode[callRecord]("call", cur.Value); err != nil {
			return verdict{}, err
		}
		kv = cur
	}
	return verdict{}, fmt.Errorf("%w: call %s kept changing", ErrEtcd, rec.CallID)
}

// decide returns the guard and the writes that settle a running call as d
// says: the call's record and its audit record, on the retention lease,
// and its owner key, deleted if the handler has returned, else a stop
// order for the worker.
func (s *Server) decide(rec *callRecord, kv *mvccpb.KeyValue, d decision, now time.Time, lease clientv3.LeaseID) (clientv3.Cmp, []clientv3.Op) {
	next := *rec
	next.State, next.Initiator, next.Reason, next.SettledAt = d.state, d.initiator, d.reason, now
	next.AuditKey = s.keys.audit(now, rec.CallID, "")
	owner := s.keys.owner(rec.Worker, rec.CallID)
	ownerOp := clientv3.OpDelete(owner)
	if d.stoppedAt == nil && !d.ownerGone {
		ownerOp = clientv3.OpPut(owner, encode(stopOrder{d.state, d.initiator, d.reason}))
	}
	return clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision), []clientv3.Op{
		clientv3.OpPut(string(kv.Key), encode(&next), clientv3.WithLease(lease)),
		clientv3.OpPut(next.AuditKey, encode(next.audit(d.outcome(), now, d.stoppedAt)), clientv3.WithLease(lease)),
		ownerOp,
		clientv3.OpDelete(s.keys.runningOf(rec)),
	}
}

// settleTxn returns nil if the decision won, else the call as it is now.
func (s *Server) settleTxn(ctx context.Context, rec *callRecord, kv *mvccpb.KeyValue, d decision) (*mvccpb.KeyValue, error) {
	lease, err := s.retention.lease(ctx)
	if err != nil {
		return nil, err
	}
	guard, ops := s.decide(rec, kv, d, s.now(), lease)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(guard).Then(ops...).Else(
		clientv3.OpGet(string(kv.Key)),
	).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.retention.forget(lease)
		}
		return nil, etcdErr(ctx, "settle", err)
	}
	if !resp.Succeeded {
		s.running.remove(rec.CallID)
		cur := resp.Responses[0].GetResponseRange().Kvs
		if len(cur) == 0 {
			return nil, fmt.Errorf("%w: call %s", ErrUnknownCall, rec.CallID)
		}
		return cur[0], nil
	}
	s.running.remove(rec.CallID)
	if d.stoppedAt != nil || d.ownerGone {
		s.view.removeOwner(rec.Worker, rec.CallID)
	}
	s.metrics.decisions.WithLabelValues(d.state).Inc()
	return nil, nil
}

// recordLost writes the single cancel_lost audit record of a call.
func (s *Server) recordLost(ctx context.Context, rec *callRecord, kv *mvccpb.KeyValue, d decision) error {
	lease, err := s.retention.lease(ctx)
	if err != nil {
		return err
	}
	now := s.now()
	next := *rec
	next.CancelLost = true
	lost := rec.audit(outcomeCancelLost, now, nil)
	lost.Initiator, lost.Reason = d.initiator, d.reason
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
	).Then(
		clientv3.OpPut(string(kv.Key), encode(&next), clientv3.WithIgnoreLease()),
		clientv3.OpPut(s.keys.audit(now, rec.CallID, "-lost"), encode(lost), clientv3.WithLease(lease)),
	).Commit()
	if err != nil {
		return etcdErr(ctx, "record lost cancel", err)
	}
	if resp.Succeeded { // else another late cancel recorded it
		s.metrics.decisions.WithLabelValues(outcomeCancelLost).Inc()
	}
	return nil
}

// GetCall implements CoordinatorService.GetCall.
func (s *Server) GetCall(ctx context.Context, req *pb.GetCallRequest) (*pb.GetCallResponse, error) {
	var rec *callRecord
	var kv *mvccpb.KeyValue
	var err error
	switch t := req.GetTarget().(type) {
	case *pb.GetCallRequest_CallId:
		if !validCallID(t.CallId) {
			return nil, toStatus(invalid("call id must be 32 hex digits"))
		}
		rec, kv, err = s.getCall(ctx, t.CallId)
	case *pb.GetCallRequest_Key:
		if err := validateCallKey(t.Key); err != nil {
			return nil, toStatus(err)
		}
		if rec, _, err = s.resolve(ctx, t.Key); err == nil {
			rec, kv, err = s.getCall(ctx, rec.CallID)
		}
	default:
		return nil, toStatus(invalid("get call needs a call id or a key"))
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetCallResponse{Call: rec.proto(kv.CreateRevision)}, nil
}

func optTime(t *timestamppb.Timestamp) *time.Time {
	if t == nil {
		return nil
	}
	v := t.AsTime()
	return &v
}
