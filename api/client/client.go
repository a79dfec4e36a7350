// Package client is the hand-written face of the mcpcancel API for the
// programs that call it (gateways, the CLI, tools): the coordinator's
// typed errors decoded from gRPC status details, the scope prefixes, and
// the request-id codec. It depends only on the generated API, so callers
// never import the coordinator's server package (or etcd) to read an
// error or build a key.
package client

import (
	"encoding/json"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// ErrorDomain is the ErrorInfo domain of coordinator errors.
const ErrorDomain = "mcpcancel.coordinator"

// Error is one kind of coordinator error. Match with errors.Is after
// Decode, or with Is.
type Error struct{ reason string }

func (e *Error) Error() string { return "mcpcancel: " + e.reason }

// Reason is the ErrorInfo reason that carries this error on the wire.
func (e *Error) Reason() string { return e.reason }

// The coordinator's errors.
var (
	ErrInvalidArgument = &Error{"INVALID_ARGUMENT"}
	ErrUnknownTool     = &Error{"UNKNOWN_TOOL"}
	ErrNoCapacity      = &Error{"NO_CAPACITY"}
	ErrDuplicate       = &Error{"DUPLICATE_REQUEST_ID"}
	ErrUnknownCall     = &Error{"UNKNOWN_CALL"}
	ErrFenceMismatch   = &Error{"FENCE_MISMATCH"}
	ErrNotOwner        = &Error{"NOT_OWNER"}
	ErrWorkerNameInUse = &Error{"WORKER_NAME_IN_USE"}
	ErrNotRetryable    = &Error{"NOT_RETRYABLE"}
	ErrSessionClosed   = &Error{"SESSION_CLOSED"}
	ErrEtcdUnavailable = &Error{"ETCD_UNAVAILABLE"}
	// ErrUnknownTask: no such task of the asking principal (or it expired).
	ErrUnknownTask = &Error{"UNKNOWN_TASK"}
	// ErrTooManyTasks: the principal holds as many tasks as it may.
	ErrTooManyTasks = &Error{"TOO_MANY_TASKS"}
	// ErrAbandoned: the Begin's caller abandoned it (AbandonBegin) first.
	ErrAbandoned = &Error{"BEGIN_ABANDONED"}
)

var byReason = map[string]*Error{}

func init() {
	for _, e := range []*Error{
		ErrInvalidArgument, ErrUnknownTool, ErrNoCapacity, ErrDuplicate, ErrUnknownCall,
		ErrFenceMismatch, ErrNotOwner, ErrWorkerNameInUse, ErrNotRetryable, ErrSessionClosed, ErrEtcdUnavailable,
		ErrUnknownTask, ErrTooManyTasks, ErrAbandoned,
	} {
		byReason[e.reason] = e
	}
}

// decoded is a status error that also is its coordinator Error.
type decoded struct {
	kind *Error
	err  error
}

func (d *decoded) Error() string   { return d.err.Error() }
func (d *decoded) Unwrap() []error { return []error{d.kind, d.err} }

// Decode returns err so that errors.Is matches the coordinator Error its
// status details name; other errors come back as they are.
func Decode(err error) error {
	if kind := Kind(err); kind != nil {
		return &decoded{kind: kind, err: err}
	}
	return err
}

// Kind returns the coordinator Error that err's status details name, or
// nil.
func Kind(err error) *Error {
	if err == nil {
		return nil
	}
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return byReason[info.GetReason()]
		}
	}
	return nil
}

// Is reports whether err, as a gRPC client received it, is target.
func Is(err error, target *Error) bool { return errors.Is(Decode(err), target) }

// Scope prefixes: a scope is where a client's request ids are unique.
const (
	// SessionScope prefixes a 2025-era Streamable HTTP session's id.
	SessionScope = "session:"
	// ConnScope prefixes a stdio connection.
	ConnScope = "conn:"
	// StreamScope prefixes a single 2026-07-28 HTTP request.
	StreamScope = "stream:"
)

// TextID is a string request id; NumberID an integer one. 1 and "1" are
// different requests.
func TextID(s string) *pb.RequestId { return &pb.RequestId{Kind: &pb.RequestId_Text{Text: s}} }

// NumberID is an integer request id.
func NumberID(n int64) *pb.RequestId { return &pb.RequestId{Kind: &pb.RequestId_Number{Number: n}} }

// ErrBadRequestID means a JSON value is not a request id: only strings
// and integers are.
var ErrBadRequestID = errors.New("mcpcancel: a request id is a string or an integer")

// ParseRequestID reads a request id as it appears in JSON-RPC.
func ParseRequestID(raw json.RawMessage) (*pb.RequestId, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, ErrBadRequestID
		}
		return TextID(s), nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return nil, ErrBadRequestID
	}
	return NumberID(n), nil
}

// RequestIDJSON renders a request id as its client sent it, as JSON (a
// control character comes out as \u0001, not Go-quoted).
func RequestIDJSON(id *pb.RequestId) json.RawMessage {
	if t, ok := id.GetKind().(*pb.RequestId_Text); ok {
		b, err := json.Marshal(t.Text)
		if err != nil {
			panic(err) // a Go string always encodes
		}
		return b
	}
	return strconv.AppendInt(nil, id.GetNumber(), 10)
}
