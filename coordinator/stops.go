package coordinator

// Stop reports: a worker says a settled call's handler really returned,
// and the stop batcher writes it to the call's audit record (stopped_at)
// and clears the call's owner key, many calls per transaction.

import (
	"container/list"
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcpcancel/mcpcancel/internal/backoff"
)

// dedupeStops keeps the first report per call: a worker may report a
// stop twice, and etcd rejects a transaction that names a key twice.
func dedupeStops(batch []stopReport) []stopReport {
	seen := make(map[string]bool, len(batch))
	out := batch[:0]
	for _, r := range batch {
		if !seen[r.callID] {
			seen[r.callID] = true
			out = append(out, r)
		}
	}
	return out
}

// stopReport says a worker's handler for a settled call really returned.
type stopReport struct {
	worker, callID string
	at             time.Time
}

// stopBatcher writes stop reports (the audit's stopped_at) and clears the
// owner keys they close, many per transaction: reports that arrive while
// one batch is written go into the next.
type stopBatcher struct {
	s       *Server
	in      chan stopReport
	decided decidedStops
}

const (
	maxStopBatch   = 64 // two operations each: etcd takes at most 128 per Txn
	stopFlushDelay = 100 * time.Millisecond
)

func newStopBatcher(s *Server) *stopBatcher {
	return &stopBatcher{s: s, in: make(chan stopReport, 4096)}
}

func (b *stopBatcher) add(ctx context.Context, r stopReport) {
	select {
	case b.in <- r:
	case <-ctx.Done():
	}
}

func (b *stopBatcher) run(ctx context.Context) error {
	for {
		var batch []stopReport
		select {
		case r := <-b.in:
			batch = append(batch, r)
		case <-ctx.Done():
			return ctx.Err()
		}
		// A batch that cannot be written (etcd unavailable) is kept and
		// retried with the reports that arrive meanwhile: dropping it would
		// leave its owner keys, and stop orders, behind until the worker dies.
		retry := backoff.Backoff{Min: stopFlushDelay, Max: 5 * time.Second}
		for {
			batch = b.fill(ctx, batch)
			err := b.flush(ctx, batch)
			if err == nil || ctx.Err() != nil {
				break
			}
			b.s.log.Warn("recording handler stops; will retry", "n", len(batch), "err", err)
			if retry.Wait(ctx) != nil {
				break
			}
		}
	}
}

// fill collects reports for up to stopFlushDelay after the first, so that
// stop records cost a fraction of a commit per call.
func (b *stopBatcher) fill(ctx context.Context, batch []stopReport) []stopReport {
	t := time.NewTimer(stopFlushDelay)
	defer t.Stop()
	for len(batch) < maxStopBatch {
		select {
		case r := <-b.in:
			batch = append(batch, r)
		case <-t.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// flush writes the batch's stops in one transaction: stopped_at on each
// call's audit record, guarded on the record not having moved, and the
// deletion of its owner key. A call this replica decided is written from
// memory; any other is read first.
func (b *stopBatcher) flush(ctx context.Context, batch []stopReport) error {
	s := b.s
	batch = dedupeStops(batch)
	var t stopTxn
	var unknown []stopReport
	for _, r := range batch {
		if d := b.decided.take(r); d != nil {
			t.ops = append(t.ops, clientv3.OpDelete(s.keys.owner(r.worker, r.callID)))
			t.stop(d.key, d.rev, *d.audit, r.at)
		} else {
			unknown = append(unknown, r)
		}
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if err := b.read(octx, unknown, &t); err != nil {
		return err
	}
	if len(t.ops) == 0 {
		return nil
	}
	tresp, err := s.commits.Txn(octx).If(t.cmps...).Then(t.ops...).Commit()
	if err != nil {
		return etcdErr(octx, "record stops", err)
	}
	if tresp.Succeeded {
		for _, a := range t.stops {
			s.metrics.stopped(a.Outcome, a.SettledAt, *a.StoppedAt)
		}
	}
	// Something moved under us: one at a time, each read. (A report
	// from memory is no longer there, so its second try reads.)
	if remembered := len(batch) - len(unknown); !tresp.Succeeded && (len(batch) > 1 || remembered > 0) {
		for _, r := range batch {
			if err := b.flush(ctx, []stopReport{r}); err != nil {
				return err
			}
		}
	}
	return nil
}

// read adds to t the stops of reports whose calls it reads: their call
// records, then their audit records.
func (b *stopBatcher) read(ctx context.Context, batch []stopReport, t *stopTxn) error {
	if len(batch) == 0 {
		return nil
	}
	s := b.s
	var gets []clientv3.Op
	for _, r := range batch {
		gets = append(gets, clientv3.OpGet(s.keys.call(r.callID)))
	}
	resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return etcdErr(ctx, "read stopped calls", err)
	}
	var auditGets []clientv3.Op
	var live []stopReport
	for i, r := range batch {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		rec, err := decode[callRecord]("call", kvs[0].Value)
		if err != nil || rec.State == stateRunning || rec.Worker != r.worker || rec.AuditKey == "" {
			continue
		}
		live = append(live, r)
		auditGets = append(auditGets, clientv3.OpGet(rec.AuditKey))
		t.ops = append(t.ops, clientv3.OpDelete(s.keys.owner(rec.Worker, rec.CallID)))
	}
	if len(live) == 0 {
		return nil
	}
	aresp, err := s.cli.Txn(ctx).Then(auditGets...).Commit()
	if err != nil {
		return etcdErr(ctx, "read audit", err)
	}
	for i, r := range live {
		kvs := aresp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		a, err := decode[AuditRecord]("audit", kvs[0].Value)
		if err != nil || a.StoppedAt != nil {
			continue
		}
		t.stop(string(kvs[0].Key), kvs[0].ModRevision, *a, r.at)
	}
	return nil
}

// stopTxn is the transaction a batch of stop reports makes.
type stopTxn struct {
	cmps  []clientv3.Cmp
	ops   []clientv3.Op
	stops []AuditRecord // observed once written
}

// stop sets stopped_at on a, the audit record at key as of rev.
func (t *stopTxn) stop(key string, rev int64, a AuditRecord, at time.Time) {
	at = at.UTC()
	a.StoppedAt = &at
	t.stops = append(t.stops, a)
	t.cmps = append(t.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
	t.ops = append(t.ops, clientv3.OpPut(key, encode(&a), clientv3.WithIgnoreLease()))
}

// decidedStops holds the audit records of the calls this replica settled
// with a stop order, until their workers report the handlers stopped: the
// batcher then writes stopped_at without reading the call and its audit
// record back, which halves its round trips in a storm of cancels and
// spares it two decodes a call. The write's guard (the audit record has
// not moved since the decision wrote it) is the reading path's, so a
// record found here gives the same result as one read. It holds at most
// maxDecidedStops, forgetting the oldest first: a report it does not
// find (another replica decided, the worker never reported, or it was
// forgotten) is read.
type decidedStops struct {
	mu     sync.Mutex
	byCall map[string]*list.Element // of *decidedStop
	order  list.List                // oldest first
}

type decidedStop struct {
	callID, worker string
	key            string // the audit record's
	rev            int64  // its ModRevision: the decision's revision
	audit          *AuditRecord
}

const maxDecidedStops = 16384

// remember records a decision that committed at rev and ordered its
// worker to stop.
func (ds *decidedStops) remember(st settlement, rev int64) {
	if st.ordered == nil {
		return
	}
	d := &decidedStop{callID: st.next.CallID, worker: st.next.Worker, key: st.next.AuditKey, rev: rev, audit: st.ordered}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.byCall == nil {
		ds.byCall = map[string]*list.Element{}
	}
	if e := ds.byCall[d.callID]; e != nil {
		ds.order.Remove(e)
	}
	ds.byCall[d.callID] = ds.order.PushBack(d)
	for ds.order.Len() > maxDecidedStops {
		delete(ds.byCall, ds.order.Remove(ds.order.Front()).(*decidedStop).callID)
	}
}

// take returns and forgets r's call, if it is held and r comes from its
// worker; else nil.
func (ds *decidedStops) take(r stopReport) *decidedStop {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	e := ds.byCall[r.callID]
	if e == nil || e.Value.(*decidedStop).worker != r.worker {
		return nil
	}
	delete(ds.byCall, r.callID)
	return ds.order.Remove(e).(*decidedStop)
}
