package coordinator

import (
	"context"
	"encoding/base64"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
)

const (
	defaultAuditPage = 100
	maxAuditPage     = 1000
)

// ListAudit implements CoordinatorService.ListAudit. Records come oldest
// first; filters apply server-side; a page scans at most ten pages' worth
// of records so a selective filter cannot make one request unbounded.
func (s *Server) ListAudit(ctx context.Context, req *pb.ListAuditRequest) (*pb.ListAuditResponse, error) {
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, toStatus(invalid("page size must not be negative"))
	case size == 0:
		size = defaultAuditPage
	}
	size = min(size, maxAuditPage)
	if err := checkAuditFilter(req); err != nil {
		return nil, toStatus(err)
	}
	from := s.keys.auditFrom(req.GetSince().AsTime())
	if req.GetSince() == nil {
		from = s.keys.audits()
	}
	if tok := req.GetPageToken(); tok != "" {
		k, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(k) <= len(s.keys.audits()) || string(k[:len(s.keys.audits())]) != s.keys.audits() {
			return nil, toStatus(invalid("bad page token"))
		}
		from = string(k)
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, from, clientv3.WithRange(s.auditRangeEnd(req)), clientv3.WithLimit(int64(size*10)))
	if err != nil {
		return nil, toStatus(etcdErr(octx, "list audit", err))
	}
	out := &pb.ListAuditResponse{}
	var last []byte
	for _, kv := range resp.Kvs {
		last = kv.Key
		a, err := decode[AuditRecord]("audit", kv.Value)
		if err != nil || !auditMatches(a, req) {
			continue
		}
		out.Records = append(out.Records, a.Proto())
		if len(out.Records) == size {
			break
		}
	}
	if last != nil && (resp.More || len(out.Records) == size) {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString(append(last, 0))
	}
	return out, nil
}

// auditPage is how many records WatchAudit reads from etcd at once.
const auditPage = 1000

// WatchAudit implements CoordinatorService.WatchAudit: records settled at or
// after since (if set), then every new record as it is written, with no
// gap: the records already written are read page by page at one revision,
// and the watch starts right after it.
func (s *Server) WatchAudit(req *pb.WatchAuditRequest, stream pb.CoordinatorService_WatchAuditServer) error {
	ctx := stream.Context()
	rev, err := s.replayAudit(ctx, req, stream)
	if err != nil {
		return err
	}
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.keys.audits(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterDelete())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return toStatus(etcdErr(ctx, "watch audit", err))
		}
		for _, ev := range wr.Events {
			if !ev.IsCreate() {
				continue // a stopped_at update, not a new record
			}
			if err := s.sendAudit(stream, ev.Kv); err != nil {
				return err
			}
		}
	}
	return toStatus(ctx.Err())
}

// replayAudit sends the records settled since req's since, if it has one,
// and returns the revision they were read at.
func (s *Server) replayAudit(ctx context.Context, req *pb.WatchAuditRequest, stream pb.CoordinatorService_WatchAuditServer) (int64, error) {
	from, end := s.keys.auditFrom(req.GetSince().AsTime()), clientv3.GetPrefixRangeEnd(s.keys.audits())
	limit := int64(auditPage)
	if req.GetSince() == nil {
		limit = 1 // only the revision is wanted
	}
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		octx, cancel := s.opCtx(ctx)
		resp, err := s.cli.Get(octx, from, opts...)
		cancel()
		if err != nil {
			return 0, toStatus(etcdErr(octx, "watch audit", err))
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if req.GetSince() == nil {
			return rev, nil
		}
		for _, kv := range resp.Kvs {
			if err := s.sendAudit(stream, kv); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (s *Server) sendAudit(stream pb.CoordinatorService_WatchAuditServer, kv *mvccpb.KeyValue) error {
	a, err := decode[AuditRecord]("audit", kv.Value)
	if err != nil {
		s.log.Error("skipping audit record", "key", string(kv.Key), "err", err)
		return nil
	}
	return stream.Send(&pb.WatchAuditResponse{Record: a.Proto()})
}

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
