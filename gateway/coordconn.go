package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/dial"
)

// coordConn is the gateway's link to the coordinators over a dial.Conn
// that it redials when it finds the link half-dead: replies lost while
// what the gateway sends still arrives keep a transport "ready" until
// keepalive gives up (15 s), and every RPC on it waits as long. Each
// attempt of the RPCs in attemptPolicies is bounded while its link is
// silent: one that hears nothing in that time, nor an answer to the
// health check it sends after unansweredAfter, replaces the connection
// (once per generation, however many found it dead), and an idempotent
// RPC goes out again on the fresh one. Streams and other RPCs pass through: a stream on the
// replaced connection ends and its owner opens it again.
type coordConn struct {
	conn *dial.Conn
	log  *slog.Logger
}

var _ grpc.ClientConnInterface = (*coordConn)(nil)

// attemptPolicy says what an attempt that went unanswered may do next.
type attemptPolicy int

const (
	passThrough attemptPolicy = iota // unbounded, as on a plain connection
	sentOnce                         // bounded and redialled, never sent twice: its outcome is ambiguous
	resent                           // bounded, redialled and sent again: idempotent
	// rewaited is a long wait (WaitTask): unbounded, for it may rightly
	// wait minutes, but sent again when a redial cuts it off.
	rewaited
)

// attemptPolicies: a Begin whose reply was lost may have created its call,
// and call.go resolves that (failLostBegin, whose GetCall goes out on the
// fresh connection); a Cancel is idempotent by key, and its retry after a
// win reports the win; GetCall (the quiet-stream probe, lost Begins) and
// GetSession (a session opened at another replica), GetTask, ListTasks,
// ListTools (a call before the tool watch delivered) and ListWorkers only
// read. A tasks/result's WaitTask is cut off by another RPC's redial
// (seen in the fault harness: "the client connection is closing"), and
// waits again. CreateTask and CancelTask pass through: a second
// CancelTask after a win would answer the client -32602.
var attemptPolicies = map[string]attemptPolicy{
	pb.CoordinatorService_Begin_FullMethodName:       sentOnce,
	pb.CoordinatorService_Cancel_FullMethodName:      resent,
	pb.CoordinatorService_GetCall_FullMethodName:     resent,
	pb.CoordinatorService_GetSession_FullMethodName:  resent,
	pb.CoordinatorService_GetTask_FullMethodName:     resent,
	pb.CoordinatorService_ListTasks_FullMethodName:   resent,
	pb.CoordinatorService_ListTools_FullMethodName:   resent,
	pb.CoordinatorService_ListWorkers_FullMethodName: resent,
	pb.CoordinatorService_WaitTask_FullMethodName:    rewaited,
}

// attemptTimeout bounds one attempt on a silent link: a read or a commit
// takes milliseconds, so an attempt past this whose link does not answer
// a health check either has lost its reply or its replica. (The worker's
// settle attempts use the same bound.)
const attemptTimeout = 2 * time.Second

// beginAttemptTimeout bounds a Begin, which is never sent twice: a Begin
// cut short is answered "could not start" though it may have been about
// to succeed, so it is given longer than a read or a cancel (a coordinator
// that is starting, or a paused etcd leader, may hold it for seconds).
const beginAttemptTimeout = 5 * time.Second

// unansweredAfter is how long an attempt waits before it asks whether
// its link still answers: a health check on the same connection, which a
// coordinator answers from memory. An attempt whose link answers is only
// slow (a replica waiting on an etcd leader election, say), not lost.
const unansweredAfter = time.Second

// maxAttempts caps the attempts of a resent RPC; each but the last found
// the link dead or was cut off by a redial.
const maxAttempts = 4

// errUnanswered is what a caller gets of an attempt that went unanswered.
var errUnanswered = status.Errorf(codes.Unavailable, "the coordinators did not answer in time")

func newCoordConn(conn *dial.Conn, log *slog.Logger) *coordConn {
	return &coordConn{conn: conn, log: log}
}

// Invoke implements grpc.ClientConnInterface with attemptPolicies.
func (c *coordConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	policy := attemptPolicies[method]
	switch policy {
	case passThrough:
		return c.conn.Invoke(ctx, method, args, reply, opts...)
	case rewaited:
		for n := 1; ; n++ {
			err := c.conn.Invoke(ctx, method, args, reply, opts...)
			if cutOff := status.Code(err) == codes.Canceled && ctx.Err() == nil; !cutOff || n == maxAttempts {
				return err
			}
		}
	}
	for n := 1; ; n++ {
		unanswered, gen, err := c.attempt(ctx, method, args, reply, opts)
		if unanswered {
			c.redial(gen, method)
			err = errUnanswered
		}
		cutOff := status.Code(err) == codes.Canceled && ctx.Err() == nil // its connection was replaced under it
		if err == nil || !(unanswered || cutOff) || policy != resent || ctx.Err() != nil || n == maxAttempts {
			return err
		}
	}
}

// errSilentLink ends an attempt whose link did not answer.
var errSilentLink = errors.New("the link to the coordinators did not answer a health check")

// attempt makes one attempt on the current connection and reports whether
// it went unanswered on a silent link. Once it has waited unansweredAfter
// it asks the link (a health check on the same connection): if that is
// answered, the attempt waits on for its caller, and the link, alive, is
// left alone, so that the calls sharing it are not cut off by a redial.
// If it is not, by the attempt's bound (or by the caller's end, if that is
// sooner), the attempt is unanswered.
func (c *coordConn) attempt(ctx context.Context, method string, args, reply any, opts []grpc.CallOption) (unanswered bool, gen uint64, err error) {
	cc, gen := c.conn.Current()
	bound := attemptTimeout
	if method == pb.CoordinatorService_Begin_FullMethodName {
		bound = beginAttemptTimeout
	}
	actx, cancel := context.WithCancelCause(ctx)
	var silent atomic.Bool
	asked := make(chan struct{})
	ask := time.AfterFunc(unansweredAfter, func() {
		defer close(asked)
		hctx, hcancel := context.WithTimeout(actx, bound-unansweredAfter)
		defer hcancel()
		if _, err := healthpb.NewHealthClient(cc).Check(hctx, &healthpb.HealthCheckRequest{}); serverAnswered(err) {
			return
		}
		silent.Store(true)
		<-hctx.Done()
		cancel(errSilentLink) // a no-op if the attempt has ended
	})
	err = cc.Invoke(actx, method, args, reply, opts...)
	cancel(nil)
	if !ask.Stop() {
		<-asked
	}
	cutShort := errors.Is(context.Cause(actx), errSilentLink)                   // at its bound
	outwaited := status.Code(err) == codes.DeadlineExceeded && ctx.Err() != nil // by its caller, before the link answered
	return err != nil && silent.Load() && (cutShort || outwaited), gen, err
}

// serverAnswered says whether a health check's outcome came from the server:
// any status but those a client makes up itself when nothing came back.
func serverAnswered(err error) bool {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled, codes.Unavailable:
		return false
	}
	return true
}

// redial replaces connection gen, if it is still the current one.
func (c *coordConn) redial(gen uint64, method string) {
	replaced, err := c.conn.Redial(gen)
	switch {
	case replaced:
		c.log.Warn("the link to the coordinators is half-dead; redialled", "why", "an attempt went unanswered", "method", method)
	case err != nil && !errors.Is(err, dial.ErrClosed):
		c.log.Error("redialling the coordinators", "err", err)
	}
}

// NewStream implements grpc.ClientConnInterface on the current connection.
func (c *coordConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.conn.NewStream(ctx, desc, method, opts...)
}
