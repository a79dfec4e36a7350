package coordinator

import (
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// ListAudit's filters, applied server-side so that the CLI and the console
// page through matches only. Time bounds narrow the etcd range (audit keys
// sort by settle time); the rest are tested per record.

// checkAuditFilter refuses filters that cannot match by their form.
func checkAuditFilter(req *pb.ListAuditRequest) error {
	switch {
	case !validIDPrefix(req.GetCallIdPrefix()):
		return invalid("call id prefix must be lower-case hex, at most 32 digits")
	case req.GetInitiator() != pb.Initiator_INITIATOR_UNSPECIFIED && InitiatorName(req.GetInitiator()) == "":
		return invalid("unknown initiator")
	case req.GetUntil() != nil && req.GetSince() != nil && req.GetUntil().AsTime().Before(req.GetSince().AsTime()):
		return invalid("until is before since")
	}
	return nil
}

// auditRangeEnd is the end of the audit keys ListAudit reads: records
// settled before until, or every record.
func (s *Server) auditRangeEnd(req *pb.ListAuditRequest) string {
	if u := req.GetUntil(); u != nil && u.AsTime().After(time.Unix(0, 0)) {
		return s.keys.auditFrom(u.AsTime())
	}
	return clientv3.GetPrefixRangeEnd(s.keys.audits())
}

// auditMatches applies req's per-record filters to a.
func auditMatches(a *AuditRecord, req *pb.ListAuditRequest) bool {
	return (req.GetCallId() == "" || a.CallID == req.GetCallId()) &&
		strings.HasPrefix(a.CallID, req.GetCallIdPrefix()) &&
		(req.GetTool() == "" || a.Tool == req.GetTool()) &&
		(req.GetOutcome() == "" || a.Outcome == req.GetOutcome()) &&
		(req.GetPrincipal() == "" || a.Principal == req.GetPrincipal()) &&
		(req.GetInitiator() == pb.Initiator_INITIATOR_UNSPECIFIED || a.Initiator == InitiatorName(req.GetInitiator())) &&
		(req.GetMethod() == "" || req.GetMethod() == methodToolsCall)
}
