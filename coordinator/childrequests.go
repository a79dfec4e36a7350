package coordinator

import (
	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Bounds on the child requests an audit record notes: a call that asks
// its client more than this keeps the first ones.
const (
	maxChildRequests = 64
	maxChildField    = 64
)

// childRequests bounds the requests toward the client a settle names.
func childRequests(ps []*pb.ChildRequest) []client.ChildRequest {
	if len(ps) > maxChildRequests {
		ps = ps[:maxChildRequests]
	}
	out := client.ChildRequestsFromProto(ps)
	for i := range out {
		out[i].Method = clip(SanitizeReason(out[i].Method))
		out[i].Outcome = clip(SanitizeReason(out[i].Outcome))
	}
	return out
}

func clip(s string) string {
	if len(s) > maxChildField {
		return s[:maxChildField]
	}
	return s
}

// withChildren notes the decision's child requests on its audit record.
func (d decision) withChildren(a *AuditRecord) *AuditRecord {
	a.ChildRequests = d.children
	return a
}
