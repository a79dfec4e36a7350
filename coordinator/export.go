package coordinator

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// exportRetry is how long the exporter waits before it watches again after
// an interruption.
const exportRetry = 50 * time.Millisecond

// Exporter writes audit records, as they are written, to a log shipper's
// file or pipe: one JSON object per line with the fields of the audit
// (call_id, scope, principal, request_id, tool, worker, gateway, outcome,
// initiator, reason, requested_at, settled_at, stopped_at).
//
// It exports the records settled from when NewExporter is called, each as
// it is first written; a record's stopped_at, filled in later, is not
// exported again. Every replica that runs an Exporter exports every
// record, so with several replicas exporting, a log shipper sees each
// record once per replica and should deduplicate on (call_id, outcome),
// which identifies a record.
type Exporter struct {
	s    *Server
	w    io.Writer
	from time.Time // settle time of the first record to export
}

// NewExporter returns an exporter of s's audit records to w. It uses s's
// etcd client and keys; s need not be running.
func NewExporter(s *Server, w io.Writer) *Exporter {
	return &Exporter{s: s, w: w, from: s.now()}
}

// Run exports until ctx is done, then returns nil. It rides out etcd
// trouble, watching again from the last revision it saw, and returns an
// error only when writing to w fails. Call it once.
func (e *Exporter) Run(ctx context.Context) error {
	rev, err := e.start(ctx)
	if err != nil || ctx.Err() != nil {
		return err
	}
	retry := backoff.Backoff{Min: exportRetry}
	for {
		var compacted bool
		rev, compacted, err = e.follow(ctx, rev)
		if err != nil {
			return err
		}
		if retry.Wait(ctx) != nil {
			return nil
		}
		if compacted {
			rev, err = e.catchUp(ctx, rev)
			if err != nil {
				return err
			}
		}
	}
}

// start writes the records settled since e.from, retrying until etcd
// answers or ctx is done, and returns the revision it read them at.
func (e *Exporter) start(ctx context.Context) (int64, error) {
	retry := backoff.Backoff{Min: exportRetry}
	for {
		octx, cancel := e.s.opCtx(ctx)
		resp, err := e.s.cli.Get(octx, e.s.keys.auditFrom(e.from), clientv3.WithRange(clientv3.GetPrefixRangeEnd(e.s.keys.audits())))
		cancel()
		if err == nil {
			return resp.Header.Revision, e.writeAll(resp.Kvs)
		}
		e.s.log.Warn("audit export: reading the audit", "err", etcdErr(octx, "read audit", err))
		if retry.Wait(ctx) != nil {
			return 0, nil
		}
	}
}

// follow watches audit/ after rev until the watch ends, writing each new
// record. It returns the last revision seen and whether etcd compacted
// past it; the error is a failed write.
func (e *Exporter) follow(ctx context.Context, rev int64) (last int64, compacted bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch if a write fails
	wch := e.s.cli.Watch(clientv3.WithRequireLeader(ctx), e.s.keys.audits(),
		clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterDelete())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			if ctx.Err() == nil {
				e.s.log.Warn("audit export: watch interrupted", "err", err)
			}
			return rev, wr.CompactRevision > 0, nil
		}
		for _, ev := range wr.Events {
			if !ev.IsCreate() {
				continue // a stopped_at update, not a new record
			}
			if err := e.write(ev.Kv); err != nil {
				return rev, false, err
			}
		}
		rev = max(rev, wr.Header.Revision)
	}
	return rev, false, nil
}

// catchUp writes the records created after rev that a compaction took out
// of the watch history, and returns the revision it read them at.
func (e *Exporter) catchUp(ctx context.Context, rev int64) (int64, error) {
	octx, cancel := e.s.opCtx(ctx)
	defer cancel()
	resp, err := e.s.cli.Get(octx, e.s.keys.audits(), clientv3.WithPrefix(),
		clientv3.WithMinCreateRev(rev+1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		e.s.log.Warn("audit export: catching up after compaction", "err", etcdErr(octx, "read audit", err))
		return rev, nil // the next watch is compacted too, and tries again
	}
	return resp.Header.Revision, e.writeAll(resp.Kvs)
}

func (e *Exporter) writeAll(kvs []*mvccpb.KeyValue) error {
	for _, kv := range kvs {
		if err := e.write(kv); err != nil {
			return err
		}
	}
	return nil
}

// write writes one stored record, which is already in its export form,
// as a line.
func (e *Exporter) write(kv *mvccpb.KeyValue) error {
	if _, err := decode[AuditRecord]("audit", kv.Value); err != nil {
		e.s.log.Error("audit export: skipping a record", "key", string(kv.Key), "err", err)
		return nil
	}
	line := make([]byte, 0, len(kv.Value)+1)
	if _, err := e.w.Write(append(append(line, kv.Value...), '\n')); err != nil {
		return fmt.Errorf("audit export: %w", err)
	}
	return nil
}
