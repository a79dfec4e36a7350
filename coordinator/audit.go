package coordinator

import (
	"context"
	"encoding/base64"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
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
