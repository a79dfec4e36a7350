package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

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
	// children are the requests the call sent toward its client, for the
	// audit record (childrequests.go).
	children []client.ChildRequest
	// toolError says a completion carries the tool's own error result: it
	// is audited as tool_error.
	toolError bool
	// owner says the call's own worker (or gateway, by call reference)
	// decides: the same decision found already made is its own earlier
	// attempt, whose reply was lost after it committed.
	owner bool
	// task is what the decision writes for a task's call (tasks.go).
	task taskWrite
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
// fence, writing the audit record in the same transaction; a placed call
// not yet recorded (kv nil) it creates already settled (createTxn). If another
// decision got there first it reports which, and for a client's late
// cancellation writes the one cancel_lost record. An owner's decision
// found already made is its own retried one, and won.
func (s *Server) settle(ctx context.Context, rec *callRecord, kv *mvccpb.KeyValue, d decision) (verdict, error) {
	v, err := s.settleOnce(ctx, rec, kv, d)
	traceDecision(ctx, rec, d, v, err) // trace.go
	return v, err
}

func (s *Server) settleOnce(ctx context.Context, rec *callRecord, kv *mvccpb.KeyValue, d decision) (verdict, error) {
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
		var cur *mvccpb.KeyValue
		var err error
		if kv == nil { // placed, and not yet recorded (start.go)
			cur, err = s.createTxn(ctx, rec, d)
		} else {
			cur, err = s.settleTxn(ctx, rec, kv, d)
		}
		if errors.Is(err, errTaskExpired) {
			d.task.expired = true // its result has nowhere to go; the decision stands
			continue
		}
		if errors.Is(err, errCreateAgain) {
			continue
		}
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

// settlement is what decide makes of a decision.
type settlement struct {
	next  *callRecord // the call's record once settled
	guard clientv3.Cmp
	ops   []clientv3.Op
	// ordered is the audit record written with a stop order (nil
	// without one): the worker's stop report will complete it.
	ordered *AuditRecord
}

// decide returns the guard and the writes that settle a running call as d
// says: the call's record and its audit record, on the retention lease,
// and its owner key, deleted if the handler has returned, else a stop
// order for the worker.
func (s *Server) decide(rec *callRecord, kv *mvccpb.KeyValue, d decision, now time.Time, lease clientv3.LeaseID) settlement {
	next := *rec
	next.State, next.Initiator, next.Reason, next.SettledAt = d.state, d.initiator, d.reason, now
	next.AuditKey = s.keys.audit(now, rec.CallID, "")
	audit := d.withChildren(next.audit(d.outcome(), now, d.stoppedAt))
	st := settlement{next: &next, guard: clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)}
	owner := s.keys.owner(rec.Worker, rec.CallID)
	ownerOp := clientv3.OpDelete(owner)
	if d.stoppedAt == nil && !d.ownerGone {
		ownerOp = clientv3.OpPut(owner, encode(stopOrder{d.state, d.initiator, d.reason}))
		st.ordered = audit
	}
	st.ops = []clientv3.Op{
		clientv3.OpPut(string(kv.Key), encode(&next), clientv3.WithLease(lease)),
		clientv3.OpPut(next.AuditKey, encode(audit), clientv3.WithLease(lease)),
	}
	// A decision that creates the call's record (start.go) finds no owner
	// key or running-set entry to clear: only the Begin, which it beat,
	// writes them, with the record.
	begun := kv.ModRevision != 0
	if begun {
		st.ops = append(st.ops, ownerOp)
	}
	switch {
	case rec.Task != nil: // a task's call is in no scope's running set
		st.ops = append(st.ops, s.taskOps(rec, d)...)
	case begun:
		st.ops = append(st.ops, clientv3.OpDelete(s.keys.runningOf(rec)))
	}
	return st
}

// settleTxn returns nil if the decision won, else the call as it is now.
func (s *Server) settleTxn(ctx context.Context, rec *callRecord, kv *mvccpb.KeyValue, d decision) (*mvccpb.KeyValue, error) {
	lease, err := s.retention.lease(ctx)
	if err != nil {
		return nil, err
	}
	st := s.decide(rec, kv, d, s.now(), lease)
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.commits.Txn(ctx).If(st.guard).Then(st.ops...).Else( // with concurrent calls' decisions
		clientv3.OpGet(string(kv.Key)),
	).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.retention.forget(lease)
			if s.taskLeaseGone(ctx, rec, d) {
				return nil, errTaskExpired
			}
		}
		return nil, etcdErr(ctx, "settle", err)
	}
	s.running.remove(rec.CallID) // won, or its guard failed: not running at this fence
	if !resp.Succeeded {
		cur := resp.Responses[0].GetResponseRange().Kvs
		if len(cur) == 0 {
			return nil, fmt.Errorf("%w: call %s", ErrUnknownCall, rec.CallID)
		}
		return cur[0], nil
	}
	s.stops.decided.remember(st, resp.Header.Revision)
	s.metrics.decided(d.state, d.initiator, 1)
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
	resp, err := s.commits.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
	).Then(
		clientv3.OpPut(string(kv.Key), encode(&next), clientv3.WithIgnoreLease()),
		clientv3.OpPut(s.keys.audit(now, rec.CallID, "-lost"), encode(lost), clientv3.WithLease(lease)),
	).Commit()
	if err != nil {
		return etcdErr(ctx, "record lost cancel", err)
	}
	if resp.Succeeded { // else another late cancel recorded it
		s.metrics.decided(outcomeCancelLost, d.initiator, 1)
	}
	return nil
}
