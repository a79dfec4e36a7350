package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/version"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sync/errgroup"
)

// runJanitor campaigns to be the one replica that settles the calls of
// workers whose lease expired, and does so while it leads.
func (s *Server) runJanitor(ctx context.Context) error {
	ttl := int(max(time.Second, s.opts.LeaseTTL) / time.Second)
	retry := backoff.Backoff{Min: s.opts.LeaseTTL / 4}
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			s.log.Warn("janitor: no session", "err", err)
			retry.Wait(ctx)
			continue
		}
		el := concurrency.NewElection(sess, s.keys.election())
		if err := el.Campaign(ctx, s.candidate()); err == nil {
			s.log.Info("janitor: leading", "replica", s.opts.Name)
			s.metrics.janitorLeader.Set(1)
			s.lead(ctx, sess, el)
			s.metrics.janitorLeader.Set(0)
			s.metrics.overdue.Set(0)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.OpTimeout)
			el.Resign(rctx)
			cancel()
		}
		sess.Close()
	}
	return ctx.Err()
}

// lead reconciles whenever a worker key goes away, and every lease TTL in
// case a change was missed, until leadership or ctx ends. Each round
// first migrates the keyspace's schema if it is behind (schema.go).
func (s *Server) lead(ctx context.Context, sess *concurrency.Session, el *concurrency.Election) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := s.cli.Watch(ctx, s.keys.workers(), clientv3.WithPrefix(), clientv3.WithFilterPut())
	wake := time.NewTimer(s.opts.LeaseTTL)
	defer wake.Stop()
	deadlines := map[string]time.Time{} // running calls' deadlines, learnt once per term
	for {
		if s.schemaBehind.Load() {
			done, err := s.migrateSchema(ctx, el, version.Schema, migrations)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("janitor: migrate the schema", "err", err)
			}
			s.schemaBehind.Store(!done)
		}
		err := s.reconcile(ctx, deadlines)
		if err != nil && ctx.Err() == nil {
			s.metrics.janitorErrors.Inc()
			s.log.Warn("janitor: reconcile", "err", err)
		}
		// Again within a lease TTL, or as the first stray falls due, so a
		// stray is settled a lease TTL past its deadline, not up to two;
		// never sooner than an eighth of a TTL, so a stray that will not
		// settle (etcd away) is not retried in a tight loop. A round that
		// failed (a read cut short) is tried again that soon.
		wait := s.nextStray(deadlines).Sub(s.now())
		if err != nil {
			wait = 0
		}
		wake.Reset(min(s.opts.LeaseTTL, max(s.opts.LeaseTTL/8, wait)))
		select {
		case <-sess.Done():
			return
		case <-ctx.Done():
			return
		case <-wake.C:
		case _, ok := <-wch:
			if !ok {
				wch = s.cli.Watch(ctx, s.keys.workers(), clientv3.WithPrefix(), clientv3.WithFilterPut())
			}
		}
	}
}

// reconcile settles the calls nobody else will:
//   - orphans: an owner key whose worker key is gone, or was re-created
//     after the call began (a new incarnation of the worker does not run
//     its predecessor's calls), fails as worker_lost;
//   - strays: a call still running a lease TTL past its deadline fails
//     as timed out. Its gateway would have cancelled it at the deadline,
//     so the gateway is gone, or never learnt the call began (Begin's
//     transaction committed but its reply was lost, and the client was
//     told the call could not start: hence FAILED, not CANCELLED), and
//     the worker may never have seen it.
//
// deadlines caches the deadline of each running call between rounds; an
// entry lives while its call's owner key is running in the latest round.
func (s *Server) reconcile(ctx context.Context, deadlines map[string]time.Time) error {
	octx, cancel := s.janitorReadCtx(ctx)
	resp, err := s.cli.Txn(octx).Then(
		clientv3.OpGet(s.keys.owners(), clientv3.WithPrefix()),
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
	// The calls are settled side by side, so that the decisions share
	// group commits: a worker lost with many calls costs a few Txns, not
	// a round trip per call, and its calls are not settled late.
	var eg errgroup.Group
	eg.SetLimit(janitorParallel)
	running := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		w, id, ok := s.keys.parseOwner(string(kv.Key))
		if !ok {
			continue
		}
		if rev, alive := live[w]; !alive || kv.CreateRevision <= rev {
			eg.Go(func() error {
				return s.skipCorrupt(id, s.abandoned(ctx, w, id, kv.CreateRevision, decision{
					state: stateFailed, initiator: "worker_lost",
					reason: fmt.Sprintf("worker %s was lost", w), ownerGone: true,
				}))
			})
			continue
		}
		if len(kv.Value) == 0 { // settled calls hold a stop order instead
			running[id] = kv
		}
	}
	for id := range deadlines {
		if running[id] == nil {
			delete(deadlines, id)
		}
	}
	if err := s.learnDeadlines(ctx, running, deadlines); err != nil {
		return errors.Join(err, eg.Wait())
	}
	now := s.now()
	overdue := 0
	for id, d := range deadlines {
		if !now.After(d.Add(s.opts.LeaseTTL)) {
			continue
		}
		overdue++
		kv := running[id]
		w, _, _ := s.keys.parseOwner(string(kv.Key))
		eg.Go(func() error {
			return s.skipCorrupt(id, s.abandoned(ctx, w, id, kv.CreateRevision, decision{
				state: stateFailed, initiator: "timeout",
				reason: "no outcome by the deadline: its gateway is gone or never learnt it began",
			}))
		})
	}
	s.metrics.overdue.Set(float64(overdue))
	return eg.Wait()
}

// nextStray is when the first running call not yet settled as a stray
// falls due: a lease TTL past its deadline (a little after, so the check
// sees it past). Zero deadlines (records gone) are due now.
func (s *Server) nextStray(deadlines map[string]time.Time) time.Time {
	next := s.now().Add(s.opts.LeaseTTL)
	for _, d := range deadlines {
		if due := d.Add(s.opts.LeaseTTL + time.Millisecond); due.Before(next) {
			next = due
		}
	}
	return next
}

// janitorParallel is how many abandoned calls the janitor settles at once.
const janitorParallel = 32

// skipCorrupt logs a call whose record does not decode, so that one bad
// record does not stop the janitor settling the others; other errors pass.
func (s *Server) skipCorrupt(id string, err error) error {
	if errors.Is(err, errCorrupt) {
		s.log.Error("janitor: skipping a call whose record is corrupt", "call", id, "err", err)
		return nil
	}
	return err
}

// janitorReadCtx bounds one of the janitor's reads at half a lease TTL
// (at most OpTimeout). A read caught by an etcd leader's death waits out
// its whole timeout; cut short, it is simply read again next round, so
// that a stray is still settled about a lease TTL past its deadline.
func (s *Server) janitorReadCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(s.opts.OpTimeout, max(s.opts.LeaseTTL/2, 100*time.Millisecond)))
}

// learnDeadlines reads the deadline of every running call not yet in
// deadlines, many calls per read. A call whose record is gone gets the
// zero deadline, so that abandoned clears its owner key.
func (s *Server) learnDeadlines(ctx context.Context, running map[string]*mvccpb.KeyValue, deadlines map[string]time.Time) error {
	var ids []string
	for id := range running {
		if _, ok := deadlines[id]; !ok {
			ids = append(ids, id)
		}
	}
	rctx, cancel := s.janitorReadCtx(ctx)
	defer cancel()
	kvs, err := s.readCalls(rctx, ids, "janitor read deadlines")
	if err != nil {
		return err
	}
	for i, id := range ids {
		deadlines[id] = time.Time{}
		if kvs[i] != nil {
			if rec, err := decode[callRecord]("call", kvs[i].Value); err == nil {
				deadlines[id] = rec.Deadline
			}
		}
	}
	return nil
}

// abandoned settles a call nobody else will settle as d says, or clears
// its owner key if the call has settled or is gone.
func (s *Server) abandoned(ctx context.Context, worker, id string, ownerRev int64, d decision) error {
	rctx, cancel := s.janitorReadCtx(ctx)
	rec, kv, err := s.getCall(rctx, id)
	cancel()
	if err == nil && rec.State == stateRunning {
		if _, err = s.settle(ctx, rec, kv, d); err == nil {
			s.log.Info("janitor: settled an abandoned call", "call", id, "worker", worker, "outcome", d.state, "reason", d.reason)
		}
		return err
	}
	if err != nil && !errors.Is(err, ErrUnknownCall) {
		return err
	}
	if rec != nil && !d.ownerGone {
		return nil // settled meanwhile; its stop order stands until the handler returns
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	owner := s.keys.owner(worker, id)
	_, err = s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(owner), "=", ownerRev)).
		Then(clientv3.OpDelete(owner)).Commit()
	if err != nil {
		return etcdErr(octx, "janitor clear owner", err)
	}
	return nil
}
