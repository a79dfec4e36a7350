package coordinator

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpcancel/mcpcancel/api/client"
)

// Errors the coordinator returns. At the gRPC boundary each maps to a status
// code and an ErrorInfo whose reason names it.
var (
	ErrInvalid         = errors.New("coordinator: invalid argument")
	ErrUnknownTool     = errors.New("coordinator: no live worker offers this tool")
	ErrNoCapacity      = errors.New("coordinator: every worker offering this tool is busy or draining")
	ErrDuplicate       = errors.New("coordinator: request id already in flight in this scope")
	ErrUnknownCall     = errors.New("coordinator: no such call")
	ErrFenceMismatch   = errors.New("coordinator: fence does not match the call")
	ErrNotOwner        = errors.New("coordinator: call belongs to another worker")
	ErrWorkerNameInUse = errors.New("coordinator: worker name held by a live lease")
	ErrNotRetryable    = errors.New("coordinator: the call may not be retried")
	ErrSessionClosed   = errors.New("coordinator: the session is closed")
	ErrEtcd            = errors.New("coordinator: etcd unavailable")
	ErrUnknownTask     = errors.New("coordinator: no such task")
	ErrTooManyTasks    = errors.New("coordinator: the principal holds too many tasks")
	ErrAbandoned       = errors.New("coordinator: the caller abandoned this Begin")
)

// ErrorDomain is the ErrorInfo domain of coordinator errors.
const ErrorDomain = client.ErrorDomain

// errorCodes maps each error to its status code and to the API's client
// face error (api/client) whose reason carries it on the wire.
var errorCodes = []struct {
	err  error
	code codes.Code
	face *client.Error
}{
	{ErrInvalid, codes.InvalidArgument, client.ErrInvalidArgument},
	{ErrUnknownTool, codes.NotFound, client.ErrUnknownTool},
	{ErrNoCapacity, codes.ResourceExhausted, client.ErrNoCapacity},
	{ErrDuplicate, codes.AlreadyExists, client.ErrDuplicate},
	{ErrUnknownCall, codes.NotFound, client.ErrUnknownCall},
	{ErrFenceMismatch, codes.FailedPrecondition, client.ErrFenceMismatch},
	{ErrNotOwner, codes.FailedPrecondition, client.ErrNotOwner},
	{ErrWorkerNameInUse, codes.AlreadyExists, client.ErrWorkerNameInUse},
	{ErrNotRetryable, codes.FailedPrecondition, client.ErrNotRetryable},
	{ErrSessionClosed, codes.FailedPrecondition, client.ErrSessionClosed},
	{ErrEtcd, codes.Unavailable, client.ErrEtcdUnavailable},
	{ErrUnknownTask, codes.NotFound, client.ErrUnknownTask},
	{ErrTooManyTasks, codes.ResourceExhausted, client.ErrTooManyTasks},
	{ErrAbandoned, codes.Aborted, client.ErrAbandoned},
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ErrorReason returns the ErrorInfo reason of a coordinator status error, or
// "" when it has none.
func ErrorReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return info.Reason
		}
	}
	return ""
}

// toStatus maps an error to a gRPC status at the boundary.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "request cancelled")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			st, _ := status.New(e.code, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: e.face.Reason(), Domain: ErrorDomain})
			return st.Err()
		}
	}
	return status.Error(codes.Internal, err.Error())
}

// etcdErr wraps an etcd client failure as ErrEtcd, keeping context errors.
func etcdErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %s: %v", ErrEtcd, op, err)
}
