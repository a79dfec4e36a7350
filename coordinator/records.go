package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Call states as stored.
const (
	stateRunning   = "running"
	stateCompleted = "completed"
	stateCancelled = "cancelled"
	stateFailed    = "failed"

	outcomeCancelLost = "cancel_lost"
	outcomeToolError  = "tool_error"
)

// callRecord is the value of calls/<call>.
type callRecord struct {
	CallID      string          `json:"call_id"`
	Scope       string          `json:"scope"`
	Principal   string          `json:"principal,omitempty"`
	RequestID   json.RawMessage `json:"request_id"`
	Tool        string          `json:"tool"`
	Worker      string          `json:"worker"`
	Gateway     string          `json:"gateway,omitempty"`
	State       string          `json:"state"`
	Initiator   string          `json:"initiator,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	RequestedAt time.Time       `json:"requested_at"`
	Deadline    time.Time       `json:"deadline"`
	SettledAt   time.Time       `json:"settled_at,omitzero"`
	AuditKey    string          `json:"audit_key,omitempty"`
	CancelLost  bool            `json:"cancel_lost,omitempty"`
	RetryOf     string          `json:"retry_of,omitempty"`
	// Set when the call runs an MCP task (see tasks.go).
	Task *taskInfo `json:"task,omitempty"`
}

// AuditRecord is one audited decision in its export form: JSON with
// snake_case fields, request_id as the client sent it, RFC 3339 times with
// nanoseconds. It is what etcd stores and what `audit list --json` prints.
type AuditRecord struct {
	CallID      string          `json:"call_id"`
	Scope       string          `json:"scope"`
	Principal   string          `json:"principal"`
	RequestID   json.RawMessage `json:"request_id"`
	Tool        string          `json:"tool"`
	Worker      string          `json:"worker"`
	Gateway     string          `json:"gateway"`
	Outcome     string          `json:"outcome"`
	Initiator   string          `json:"initiator"`
	Reason      string          `json:"reason"`
	RequestedAt time.Time       `json:"requested_at"`
	SettledAt   time.Time       `json:"settled_at"`
	StoppedAt   *time.Time      `json:"stopped_at"`
	RetryOf     string          `json:"retry_of,omitempty"`
	TaskID      string          `json:"task_id,omitempty"`
}

// stopOrder is the value of an owners/ key once the call was settled without
// its worker: the worker must stop the handler.
type stopOrder struct {
	State     string `json:"state"`
	Initiator string `json:"initiator,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

func (r *callRecord) audit(outcome string, settled time.Time, stopped *time.Time) *AuditRecord {
	return &AuditRecord{
		CallID: r.CallID, Scope: r.Scope, Principal: r.Principal, RequestID: r.RequestID,
		Tool: r.Tool, Worker: r.Worker, Gateway: r.Gateway, Outcome: outcome,
		Initiator: r.Initiator, Reason: r.Reason,
		RequestedAt: r.RequestedAt, SettledAt: settled, StoppedAt: stopped, RetryOf: r.RetryOf,
		TaskID: r.taskID(),
	}
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

// InitiatorName is the audit spelling of an initiator.
func InitiatorName(i pb.Initiator) string { return initiatorNames[i] }

func initiatorFromName(s string) pb.Initiator {
	for k, v := range initiatorNames {
		if v == s {
			return k
		}
	}
	return pb.Initiator_INITIATOR_UNSPECIFIED
}

var stateValues = map[string]pb.CallState{
	stateRunning:   pb.CallState_CALL_STATE_RUNNING,
	stateCompleted: pb.CallState_CALL_STATE_COMPLETED,
	stateCancelled: pb.CallState_CALL_STATE_CANCELLED,
	stateFailed:    pb.CallState_CALL_STATE_FAILED,
}

func (r *callRecord) proto(fence int64) *pb.Call {
	return &pb.Call{
		CallId:      r.CallID,
		Key:         &pb.CallKey{Scope: r.Scope, RequestId: requestIDFromJSON(r.RequestID)},
		Principal:   r.Principal,
		Tool:        r.Tool,
		Worker:      r.Worker,
		Gateway:     r.Gateway,
		State:       stateValues[r.State],
		Fence:       fence,
		Initiator:   initiatorFromName(r.Initiator),
		Reason:      r.Reason,
		RequestedAt: ts(r.RequestedAt),
		Deadline:    ts(r.Deadline),
		SettledAt:   ts(r.SettledAt),
		RetryOf:     r.RetryOf,
		TaskId:      r.taskID(),
	}
}

// Proto converts an audit record to its wire form.
func (a *AuditRecord) Proto() *pb.AuditRecord {
	p := &pb.AuditRecord{
		CallId: a.CallID, Scope: a.Scope, Principal: a.Principal,
		RequestId: requestIDFromJSON(a.RequestID), Tool: a.Tool, Worker: a.Worker,
		Gateway: a.Gateway, Outcome: a.Outcome, Initiator: initiatorFromName(a.Initiator),
		Reason: a.Reason, RequestedAt: ts(a.RequestedAt), SettledAt: ts(a.SettledAt),
		RetryOf: a.RetryOf, TaskId: a.TaskID,
	}
	if a.StoppedAt != nil {
		p.StoppedAt = timestamppb.New(*a.StoppedAt)
	}
	return p
}

// AuditFromProto converts a wire audit record to its export form.
func AuditFromProto(p *pb.AuditRecord) *AuditRecord {
	a := &AuditRecord{
		CallID: p.GetCallId(), Scope: p.GetScope(), Principal: p.GetPrincipal(),
		RequestID: client.RequestIDJSON(p.GetRequestId()), Tool: p.GetTool(), Worker: p.GetWorker(),
		Gateway: p.GetGateway(), Outcome: p.GetOutcome(), Initiator: InitiatorName(p.GetInitiator()),
		Reason: p.GetReason(), RequestedAt: p.GetRequestedAt().AsTime(), SettledAt: p.GetSettledAt().AsTime(),
		RetryOf: p.GetRetryOf(), TaskID: p.GetTaskId(),
	}
	if p.GetStoppedAt() != nil {
		t := p.GetStoppedAt().AsTime()
		a.StoppedAt = &t
	}
	return a
}

// requestIDFromJSON reads a request id the coordinator itself stored.
func requestIDFromJSON(raw json.RawMessage) *pb.RequestId {
	id, _ := client.ParseRequestID(raw) // stored from a valid id, so it parses
	return id
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// errCorrupt marks a record that does not decode.
var errCorrupt = errors.New("coordinator: corrupt record")

func decode[T any](what string, b []byte) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCorrupt, what, err)
	}
	return v, nil
}

func encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own records always marshal
	}
	return string(b)
}
