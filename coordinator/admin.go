package coordinator

import (
	"context"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// methodToolsCall is the method of the records written before records
// named their method, and of every tools/call record (stored empty).
const methodToolsCall = "tools/call"

// Admin serves AdminService for one replica: what runs now, and an
// operator's cancel. It reads etcd directly, so any replica lists every
// replica's calls.
type Admin struct {
	pb.UnimplementedAdminServiceServer
	s *Server
}

var _ pb.AdminServiceServer = (*Admin)(nil)

// NewAdmin returns the AdminService of s.
func NewAdmin(s *Server) *Admin { return &Admin{s: s} }

// ListCalls implements AdminService.ListCalls: the owners/ keys name the
// calls whose handlers have not returned, so the listing reads what runs,
// never history.
func (a *Admin) ListCalls(ctx context.Context, req *pb.ListCallsRequest) (*pb.ListCallsResponse, error) {
	prefix := req.GetCallIdPrefix()
	if !validIDPrefix(prefix) {
		return nil, toStatus(invalid("call id prefix must be lower-case hex, at most 32 digits"))
	}
	calls, _, err := a.running(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListCallsResponse{}
	for _, c := range calls {
		if strings.HasPrefix(c.GetCall().GetCallId(), prefix) {
			out.Calls = append(out.Calls, c)
		}
	}
	return out, nil
}

func validIDPrefix(p string) bool {
	return len(p) <= 32 && strings.Trim(p, "0123456789abcdef") == ""
}

// running reads the running calls, oldest first, with their last
// progress, and the revision of the owners/ listing they were found by.
// The owners/ keys and the workers' progress digests are read at one
// revision.
func (a *Admin) running(ctx context.Context) ([]*pb.RunningCall, int64, error) {
	s := a.s
	octx, cancel := s.opCtx(ctx)
	resp, err := s.cli.Txn(octx).Then(
		clientv3.OpGet(s.keys.owners(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.progress(), clientv3.WithPrefix()),
	).Commit()
	cancel()
	if err != nil {
		return nil, 0, etcdErr(octx, "list running calls", err)
	}
	owners, progress := resp.Responses[0].GetResponseRange(), s.progressByCall(resp.Responses[1].GetResponseRange().Kvs)
	var ids []string
	for _, kv := range owners.Kvs {
		if _, id, ok := s.keys.parseOwner(string(kv.Key)); ok {
			ids = append(ids, id)
		}
	}
	kvs, err := s.readCalls(ctx, ids, "read running calls")
	if err != nil {
		return nil, 0, err
	}
	var out []*pb.RunningCall
	for _, kv := range kvs {
		if c := a.runningCall(kv); c != nil && c.GetCall().GetState() == pb.CallState_CALL_STATE_RUNNING {
			progress.fill(c)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(x, y *pb.RunningCall) int {
		return x.GetCall().GetRequestedAt().AsTime().Compare(y.GetCall().GetRequestedAt().AsTime())
	})
	return out, resp.Header.Revision, nil
}

// runningCall converts a call key's value; nil if it is absent or corrupt.
func (a *Admin) runningCall(kv *mvccpb.KeyValue) *pb.RunningCall {
	if kv == nil {
		return nil
	}
	rec, err := decode[callRecord]("call", kv.Value)
	if err != nil {
		a.s.log.Error("skipping call record", "key", string(kv.Key), "err", err)
		return nil
	}
	c := &pb.RunningCall{Call: rec.proto(kv.CreateRevision), Method: rec.method()}
	end := a.s.now()
	if rec.State != stateRunning {
		end = rec.SettledAt
	}
	c.Age = durationpb.New(end.Sub(rec.RequestedAt))
	return c
}

// WatchCalls implements AdminService.WatchCalls: the running calls, SYNCED,
// then each call as it starts (RUNNING) and as it settles (SETTLED). It
// follows calls/ from the revision the listing was read at, so no call
// that starts or ends in between is missed.
func (a *Admin) WatchCalls(_ *pb.WatchCallsRequest, stream pb.AdminService_WatchCallsServer) error {
	ctx := stream.Context()
	if err := a.s.waitReady(ctx); err != nil {
		return toStatus(err)
	}
	calls, rev, err := a.running(ctx)
	if err != nil {
		return toStatus(err)
	}
	shown := map[string]bool{}
	for _, c := range calls {
		shown[c.GetCall().GetCallId()] = true
		if err := stream.Send(&pb.WatchCallsResponse{Event: pb.CallEvent_CALL_EVENT_RUNNING, Call: c}); err != nil {
			return err
		}
	}
	if err := stream.Send(&pb.WatchCallsResponse{Event: pb.CallEvent_CALL_EVENT_SYNCED}); err != nil {
		return err
	}
	wch := a.s.cli.Watch(clientv3.WithRequireLeader(ctx), a.s.keys.call(""), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterDelete())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return toStatus(etcdErr(ctx, "watch calls", err))
		}
		for _, ev := range wr.Events {
			if err := a.sendChange(stream, ev.Kv, shown); err != nil {
				return err
			}
		}
	}
	return toStatus(ctx.Err())
}

// sendChange sends what a write of a call key means: a new running call,
// or the end of one this stream has shown.
func (a *Admin) sendChange(stream pb.AdminService_WatchCallsServer, kv *mvccpb.KeyValue, shown map[string]bool) error {
	c := a.runningCall(kv)
	if c == nil {
		return nil
	}
	id := c.GetCall().GetCallId()
	running := c.GetCall().GetState() == pb.CallState_CALL_STATE_RUNNING
	switch {
	case running && !shown[id]:
		shown[id] = true
		return stream.Send(&pb.WatchCallsResponse{Event: pb.CallEvent_CALL_EVENT_RUNNING, Call: c})
	case !running && shown[id]:
		delete(shown, id)
		return stream.Send(&pb.WatchCallsResponse{Event: pb.CallEvent_CALL_EVENT_SETTLED, Call: c})
	}
	return nil // a cancel_lost mark, or a call that began and ended before the listing
}

// OperatorCancel implements AdminService.OperatorCancel: the same fenced
// decision as any cancel, with initiator operator and a reason that names
// the operator by the certificate it called with.
func (a *Admin) OperatorCancel(ctx context.Context, req *pb.OperatorCancelRequest) (*pb.OperatorCancelResponse, error) {
	resp, err := a.operatorCancel(ctx, req)
	if err == nil {
		a.s.metrics.cancels.WithLabelValues(cancelResultLabel(resp.GetResult())).Inc()
	}
	return resp, toStatus(err)
}

func (a *Admin) operatorCancel(ctx context.Context, req *pb.OperatorCancelRequest) (*pb.OperatorCancelResponse, error) {
	if !validCallID(req.GetCallId()) {
		return nil, invalid("call id must be 32 hex digits; list running calls for the full id")
	}
	if err := a.s.waitReady(ctx); err != nil {
		return nil, err
	}
	reason := OperatorReason(callerIdentity(ctx), req.GetOnBehalfOf(), req.GetReason())
	rec, kv, err := a.s.getCall(ctx, req.GetCallId())
	if err != nil {
		return nil, err
	}
	d := decision{state: stateCancelled, initiator: InitiatorName(pb.Initiator_INITIATOR_OPERATOR), reason: reason}
	v, err := a.s.settle(ctx, rec, kv, d)
	if err != nil {
		return nil, err
	}
	out := &pb.OperatorCancelResponse{Result: cancelResults[v.result], Reason: reason}
	out.WinnerInitiator, out.WinnerReason = v.winner()
	return out, nil
}

// OperatorReason is the audited reason of an operator's cancel: who (the
// name on the caller's certificate, and the person a tool asked for),
// then why. identity is empty when the caller presented no certificate.
func OperatorReason(identity, onBehalfOf, why string) string {
	onBehalfOf = strings.TrimSpace(onBehalfOf)
	var who string
	switch {
	case identity == "" && onBehalfOf == "":
		who = "unknown (unverified: no client certificate)"
	case identity == "":
		who = onBehalfOf + " (unverified: no client certificate)"
	case onBehalfOf == "" || onBehalfOf == identity:
		who = identity
	default:
		who = identity + " for " + onBehalfOf
	}
	r := "cancelled by operator " + who
	if why = strings.TrimSpace(why); why != "" {
		r += ": " + why
	}
	return SanitizeReason(r)
}

// callerIdentity names ctx's peer by its verified client certificate:
// its Subject CommonName, or else its first OrganizationalUnit; "" when
// it presented none (plaintext, on a loopback dev setup).
func callerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return ""
	}
	cert := info.State.VerifiedChains[0][0]
	switch {
	case cert.Subject.CommonName != "":
		return SanitizeReason(cert.Subject.CommonName)
	case len(cert.Subject.OrganizationalUnit) > 0:
		return SanitizeReason(cert.Subject.OrganizationalUnit[0])
	}
	return "certificate " + cert.SerialNumber.String()
}
