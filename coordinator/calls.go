package coordinator

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

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
		children:  childRequests(req.GetChildRequests()),
	}
	if d.initiator == "" {
		return nil, invalid("initiator is required")
	}
	switch t := req.GetTarget().(type) {
	case *pb.CancelRequest_Key:
		return s.cancelKey(ctx, t.Key, req.GetPrincipal(), d, req.GetAwaitRecord())
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
func (s *Server) cancelKey(ctx context.Context, key *pb.CallKey, principal string, d decision, await bool) (*pb.CancelResponse, error) {
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
	if errors.Is(err, ErrUnknownCall) && await && s.awaitRecord(ctx, key) {
		v, id, err = s.cancelResolved(ctx, key, principal, d, false)
	}
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

// Complete implements CoordinatorService.Complete.
func (s *Server) Complete(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	// The call's time is to its completion's arrival: ownedCall may wait
	// for the call's Begin to commit, and a time that counted that wait
	// would never be quicker than a commit, so no Begin would linger.
	arrived := s.now()
	rec, kv, err := s.ownedCall(ctx, req.GetCall())
	if err != nil {
		return nil, toStatus(err)
	}
	if rec.Task == nil && rec.State == stateRunning {
		s.quick.completed(quickTarget(rec), arrived.Sub(rec.RequestedAt))
	}
	stopped := optTime(req.GetStoppedAt())
	if stopped == nil {
		t := s.now()
		stopped = &t
	}
	d := s.withTaskResult(rec, decision{state: stateCompleted, stoppedAt: stopped, owner: true, toolError: req.GetToolError(),
		children: childRequests(req.GetChildRequests())}, req.GetTaskResultJson())
	v, err := s.settle(ctx, rec, kv, d)
	if err != nil {
		return nil, toStatus(err)
	}
	if d.state == stateFailed && v.result == won { // a task's result over the bound failed it
		return &pb.CompleteResponse{Result: pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED, WinnerInitiator: pb.Initiator_INITIATOR_TOOL, WinnerReason: d.reason}, nil
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
		children:  childRequests(req.GetChildRequests()),
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

// maxStateIDs bounds the calls one GetCallStates may name.
const maxStateIDs = 1024

// GetCallStates implements CoordinatorService.GetCallStates: the states of
// many calls in one serializable read per maxTxnOps of them. A probe only
// asks whether a call was decided without its worker; a lagging member
// answers as of a moment ago, and the next probe sees more.
func (s *Server) GetCallStates(ctx context.Context, req *pb.GetCallStatesRequest) (*pb.GetCallStatesResponse, error) {
	ids := req.GetCallIds()
	if len(ids) > maxStateIDs {
		return nil, toStatus(invalid("at most %d call ids", maxStateIDs))
	}
	for _, id := range ids {
		if !validCallID(id) {
			return nil, toStatus(invalid("call id must be 32 hex digits"))
		}
	}
	states := make([]pb.CallState, 0, len(ids))
	for chunk := range slices.Chunk(ids, maxTxnOps) {
		ops := make([]clientv3.Op, len(chunk))
		for i, id := range chunk {
			ops[i] = clientv3.OpGet(s.keys.call(id), clientv3.WithSerializable())
		}
		octx, cancel := s.opCtx(ctx)
		resp, err := s.cli.Txn(octx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, toStatus(etcdErr(octx, "read call states", err))
		}
		for _, r := range resp.Responses {
			state := pb.CallState_CALL_STATE_UNSPECIFIED
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				rec, err := decode[callRecord]("call", kvs[0].Value)
				if err != nil {
					return nil, toStatus(err)
				}
				state = stateValues[rec.State]
			}
			states = append(states, state)
		}
	}
	return &pb.GetCallStatesResponse{States: states}, nil
}
