package coordinator

// Stop reports: a worker says a settled call's handler really returned,
// and the stop batcher writes it to the call's audit record (stopped_at)
// and clears the call's owner key, many calls per transaction.

import (
	"context"
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
	s  *Server
	in chan stopReport
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

// flush reads the batch's calls and audit records, then in one transaction
// sets stopped_at and deletes the owner keys, if none of them moved.
func (b *stopBatcher) flush(ctx context.Context, batch []stopReport) error {
	s := b.s
	batch = dedupeStops(batch)
	var gets []clientv3.Op
	for _, r := range batch {
		gets = append(gets, clientv3.OpGet(s.keys.call(r.callID)))
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).Then(gets...).Commit()
	if err != nil {
		return etcdErr(octx, "read stopped calls", err)
	}
	var cmps []clientv3.Cmp
	var ops, auditGets []clientv3.Op
	var live []stopReport
	var stops []AuditRecord // observed once written
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
		ops = append(ops, clientv3.OpDelete(s.keys.owner(rec.Worker, rec.CallID)))
	}
	if len(live) == 0 {
		return nil
	}
	aresp, err := s.cli.Txn(octx).Then(auditGets...).Commit()
	if err != nil {
		return etcdErr(octx, "read audit", err)
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
		at := r.at.UTC()
		a.StoppedAt = &at
		stops = append(stops, *a)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kvs[0].Key)), "=", kvs[0].ModRevision))
		ops = append(ops, clientv3.OpPut(string(kvs[0].Key), encode(a), clientv3.WithIgnoreLease()))
	}
	tresp, err := s.commits.Txn(octx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return etcdErr(octx, "record stops", err)
	}
	if tresp.Succeeded {
		for _, a := range stops {
			s.metrics.stopped(a.Outcome, a.SettledAt, *a.StoppedAt)
		}
	}
	if !tresp.Succeeded && len(batch) > 1 {
		for _, r := range batch { // something moved under us: one at a time
			if err := b.flush(ctx, []stopReport{r}); err != nil {
				return err
			}
		}
	}
	return nil
}
