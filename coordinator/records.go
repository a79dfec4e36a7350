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
	Method      string          `json:"method,omitempty"` // empty: tools/call, as before methods were recorded
	Tool        string          `json:"tool"`             // the target: a tool, resource URI, prompt name or completion reference
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
	BeginID     string          `json:"begin_id,omitempty"` // the Begin that placed it, if its caller named it
	// Set when the call runs an MCP task (see tasks.go).
	Task    *taskInfo `json:"task,omitempty"`
	TraceID string    `json:"trace_id,omitempty"`

	// placed is the call's placement while it has no record (start.go).
	placed *placement
}

// AuditRecord is one audited decision in its export form; the API's
// client face defines it, as clients read it too.
type AuditRecord = client.AuditRecord

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
		Method: r.method(), Tool: r.Tool, Worker: r.Worker, Gateway: r.Gateway, Outcome: outcome,
		Initiator: r.Initiator, Reason: r.Reason,
		RequestedAt: r.RequestedAt, SettledAt: settled, StoppedAt: stopped, RetryOf: r.RetryOf,
		TaskID:  r.taskID(),
		TraceID: r.TraceID,
	}
}

// InitiatorName is the audit spelling of an initiator.
func InitiatorName(i pb.Initiator) string { return client.InitiatorName(i) }

func initiatorFromName(s string) pb.Initiator { return client.InitiatorFromName(s) }

var stateValues = map[string]pb.CallState{
	stateRunning:   pb.CallState_CALL_STATE_RUNNING,
	stateCompleted: pb.CallState_CALL_STATE_COMPLETED,
	stateCancelled: pb.CallState_CALL_STATE_CANCELLED,
	stateFailed:    pb.CallState_CALL_STATE_FAILED,
}

// method is the record's MCP method; the API spells tools/call as the
// empty method.
func (r *callRecord) method() string {
	if r.Method == "" {
		return methodToolsCall
	}
	return r.Method
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
		TraceId:     r.TraceID,
		Method:      r.method(),
	}
}

// AuditFromProto converts a wire audit record to its export form.
func AuditFromProto(p *pb.AuditRecord) *AuditRecord { return client.AuditFromProto(p) }

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
