package coordinator

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

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

// ownedCall finds the call a worker or gateway names by id and fence: in
// the cache of calls this replica began, or else in etcd.
func (s *Server) ownedCall(ctx context.Context, ref *pb.CallRef) (*callRecord, *mvccpb.KeyValue, error) {
	if !validCallID(ref.GetCallId()) {
		return nil, nil, invalid("call id must be 32 hex digits")
	}
	if ref.GetWorker() == "" {
		return nil, nil, invalid("a call reference must name the call's worker")
	}
	if ref.GetFence() == 0 && len(ref.GetPlacement()) > 0 {
		return s.placedCall(ctx, ref) // begun beside its work (start.go)
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
