package client

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// HeaderScope is the HTTP response header in which a gateway names the
// scope a call runs in, so a client can look its calls up in the audit.
const HeaderScope = "Mcpcancel-Scope"

// AuditRecord is one audited decision in its export form: JSON with
// snake_case fields, request_id as the client sent it, RFC 3339 times with
// nanoseconds. It is what the coordinator stores and what `audit list
// --json` prints.
type AuditRecord struct {
	CallID      string          `json:"call_id"`
	Scope       string          `json:"scope"`
	Principal   string          `json:"principal"`
	RequestID   json.RawMessage `json:"request_id"`
	Method      string          `json:"method"`
	Tool        string          `json:"tool"` // or the resource URI, prompt name, completion reference
	Worker      string          `json:"worker"`
	Gateway     string          `json:"gateway"`
	Outcome     string          `json:"outcome"`
	Initiator   string          `json:"initiator"`
	Reason      string          `json:"reason"`
	RequestedAt time.Time       `json:"requested_at"`
	SettledAt   time.Time       `json:"settled_at"`
	StoppedAt   *time.Time      `json:"stopped_at"`
	RetryOf     string          `json:"retry_of,omitempty"`
	TraceID     string          `json:"trace_id,omitempty"`
	// ChildRequests are the requests the call sent toward its client.
	ChildRequests []ChildRequest `json:"child_requests,omitempty"`
	// The MCP task the call runs, if it runs one.
	TaskID string `json:"task_id,omitempty"`
}

// ChildRequest is a request a call sent toward its client and how it
// ended (see the proto's ChildRequest for the outcomes).
type ChildRequest struct {
	Seq     int64  `json:"seq"`
	Method  string `json:"method"`
	Outcome string `json:"outcome"`
}

// ChildRequestsFromProto converts wire child requests.
func ChildRequestsFromProto(ps []*pb.ChildRequest) []ChildRequest {
	var out []ChildRequest
	for _, p := range ps {
		out = append(out, ChildRequest{Seq: p.GetSeq(), Method: p.GetMethod(), Outcome: p.GetOutcome()})
	}
	return out
}

var initiatorNames = map[pb.Initiator]string{
	pb.Initiator_INITIATOR_CLIENT:      "client",
	pb.Initiator_INITIATOR_TIMEOUT:     "timeout",
	pb.Initiator_INITIATOR_DISCONNECT:  "disconnect",
	pb.Initiator_INITIATOR_SHUTDOWN:    "shutdown",
	pb.Initiator_INITIATOR_OPERATOR:    "operator",
	pb.Initiator_INITIATOR_WORKER_LOST: "worker_lost",
	pb.Initiator_INITIATOR_TOOL:        "tool",
}

// InitiatorName is the audit spelling of an initiator ("" for none).
func InitiatorName(i pb.Initiator) string { return initiatorNames[i] }

// InitiatorFromName reads an initiator's audit spelling; an unknown one
// is INITIATOR_UNSPECIFIED.
func InitiatorFromName(s string) pb.Initiator {
	for k, v := range initiatorNames {
		if v == s {
			return k
		}
	}
	return pb.Initiator_INITIATOR_UNSPECIFIED
}

// Proto converts an audit record to its wire form.
func (a *AuditRecord) Proto() *pb.AuditRecord {
	id, _ := ParseRequestID(a.RequestID) // written from a valid id, so it parses
	p := &pb.AuditRecord{
		CallId: a.CallID, Scope: a.Scope, Principal: a.Principal,
		RequestId: id, Tool: a.Tool, Worker: a.Worker,
		Gateway: a.Gateway, Outcome: a.Outcome, Initiator: InitiatorFromName(a.Initiator),
		Reason: a.Reason, RequestedAt: timestamp(a.RequestedAt), SettledAt: timestamp(a.SettledAt),
		RetryOf: a.RetryOf, TraceId: a.TraceID, Method: a.Method, TaskId: a.TaskID,
	}
	if a.StoppedAt != nil {
		p.StoppedAt = timestamppb.New(*a.StoppedAt)
	}
	for _, c := range a.ChildRequests {
		p.ChildRequests = append(p.ChildRequests, &pb.ChildRequest{Seq: c.Seq, Method: c.Method, Outcome: c.Outcome})
	}
	return p
}

// AuditFromProto converts a wire audit record to its export form.
func AuditFromProto(p *pb.AuditRecord) *AuditRecord {
	a := &AuditRecord{
		CallID: p.GetCallId(), Scope: p.GetScope(), Principal: p.GetPrincipal(),
		RequestID: RequestIDJSON(p.GetRequestId()), Tool: p.GetTool(), Worker: p.GetWorker(),
		Gateway: p.GetGateway(), Outcome: p.GetOutcome(), Initiator: InitiatorName(p.GetInitiator()),
		Reason: p.GetReason(), RequestedAt: p.GetRequestedAt().AsTime(), SettledAt: p.GetSettledAt().AsTime(),
		RetryOf: p.GetRetryOf(), TraceID: p.GetTraceId(), Method: p.GetMethod(), TaskID: p.GetTaskId(),
		ChildRequests: ChildRequestsFromProto(p.GetChildRequests()),
	}
	if p.GetStoppedAt() != nil {
		t := p.GetStoppedAt().AsTime()
		a.StoppedAt = &t
	}
	return a
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
