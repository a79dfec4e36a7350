package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// runJanitor campaigns to be the one replica that settles the calls of
// workers whose lease expired, and does so while it leads.
func (s *Server) runJanitor(ctx context.Context) error {
	ttl := int(max(time.Second, s.opts.LeaseTTL) / time.Second)
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			s.log.Warn("janitor: no session", "err", err)
			backoff(ctx, s.opts.LeaseTTL/4)
			continue
		}
		el := concurrency.NewElection(sess, s.keys.election())
		if err := el.Campaign(ctx, s.opts.Name); err == nil {
			s.log.Info("janitor: leading", "replica", s.opts.Name)
			s.lead(ctx, sess)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.OpTimeout)
			el.Resign(rctx)
			cancel()
		}
		sess.Close()
	}
	return ctx.Err()
}

// lead reconciles whenever a worker key goes away, and every lease TTL in
// case a change was missed, until leadership or ctx ends.
func (s *Server) lead(ctx context.Context, sess *concurrency.Session) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := s.cli.Watch(ctx, s.keys.workers(), clientv3.WithPrefix(), clientv3.WithFilterPut())
	tick := time.NewTicker(s.opts.LeaseTTL)
	defer tick.Stop()
	for {
		if err := s.reconcile(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("janitor: reconcile", "err", err)
		}
		select {
		case <-sess.Done():
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		case _, ok := <-wch:
			if !ok {
				wch = s.cli.Watch(ctx, s.keys.workers(), clientv3.WithPrefix(), clientv3.WithFilterPut())
			}
		}
	}
}

// reconcile settles every orphaned owner key: one whose worker key is gone,
// or was re-created after the call began (a new incarnation of the worker
// does not run its predecessor's calls).
func (s *Server) reconcile(ctx context.Context) error {
	octx, cancel := s.opCtx(ctx)
	resp, err := s.cli.Txn(octx).Then(
		clientv3.OpGet(s.keys.owners(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.workers(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	cancel()
	if err != nil {
		return etcdErr(octx, "janitor read", err)
	}
	live := map[string]int64{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		live[string(kv.Key[len(s.keys.workers()):])] = kv.CreateRevision
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		w, id, ok := s.keys.parseOwner(string(kv.Key))
		if !ok {
			continue
		}
		if rev, alive := live[w]; alive && kv.CreateRevision > rev {
			continue
		}
		if err := s.orphan(ctx, w, id, kv.CreateRevision); err != nil {
			return err
		}
	}
	return nil
}

// orphan fails a call whose worker is gone, or clears the owner key of a
// call that already settled.
func (s *Server) orphan(ctx context.Context, worker, id string, ownerRev int64) error {
	rec, kv, err := s.getCall(ctx, id)
	if err == nil && rec.State == stateRunning {
		_, err = s.settle(ctx, rec, kv, decision{
			state: stateFailed, initiator: "worker_lost",
			reason: fmt.Sprintf("worker %s was lost", worker), ownerGone: true,
		})
		if err == nil {
			s.log.Info("janitor: failed call of lost worker", "call", id, "worker", worker)
		}
		return err
	}
	if err != nil && !errors.Is(err, ErrUnknownCall) {
		return err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	owner := s.keys.owner(worker, id)
	_, err = s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(owner), "=", ownerRev)).
		Then(clientv3.OpDelete(owner)).Commit()
	if err != nil {
		return etcdErr(octx, "janitor clear owner", err)
	}
	s.view.removeOwner(worker, id)
	return nil
}
