package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/dial"
)

// coordConn is the gateway's link to the coordinators over a dial.Conn
// that it redials when it finds the link half-dead: replies lost while
// what the gateway sends still arrives keep a transport "ready" until
// keepalive gives up (15 s), and every RPC on it waits as long. Each
// attempt of the RPCs in attemptPolicies is bounded; one that hears
// nothing in that time replaces the connection (once per generation,
// however many found it dead), and an idempotent RPC goes out again on
// the fresh one. Streams and other RPCs pass through: a stream on the
// replaced connection ends when it closes, retireGrace later, and its
// owner opens it again.
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
// and call.go settles that (abandonBegin, which goes out on the fresh
// connection, and is idempotent like Cancel); a Cancel is idempotent by key, and its retry after a
// win reports the win; GetCall (the quiet-stream probe, lost Begins) and
// GetSession (a session opened at another replica), GetTask, ListTasks,
// ListTools (a call before the tool watch delivered) and ListWorkers only
// read. A tasks/result's WaitTask is cut off by another RPC's redial
// (seen in the fault harness: "the client connection is closing"), and
// waits again. CreateTask and CancelTask pass through: a second
// CancelTask after a win would answer the client -32602.
var attemptPolicies = map[string]attemptPolicy{
	pb.CoordinatorService_Begin_FullMethodName:         sentOnce,
	pb.CoordinatorService_AbandonBegin_FullMethodName:  resent,
	pb.CoordinatorService_Cancel_FullMethodName:        resent,
	pb.CoordinatorService_GetCall_FullMethodName:       resent,
	pb.CoordinatorService_GetCallStates_FullMethodName: resent,
	pb.CoordinatorService_GetSession_FullMethodName:    resent,
	pb.CoordinatorService_GetTask_FullMethodName:       resent,
	pb.CoordinatorService_ListTasks_FullMethodName:     resent,
	pb.CoordinatorService_ListTools_FullMethodName:     resent,
	pb.CoordinatorService_ListWorkers_FullMethodName:   resent,
	pb.CoordinatorService_WaitTask_FullMethodName:      rewaited,
}

// attemptTimeout bounds one attempt: a read or a commit takes
// milliseconds, so an attempt past this has lost its reply or its
// replica. (The worker's settle attempts use the same bound.)
const attemptTimeout = 2 * time.Second

// beginAttemptTimeout bounds a Begin, which is never sent twice: a Begin
// cut short is answered "could not start" though it may have been about
// to succeed, so it is given longer than a read or a cancel (a coordinator
// that is starting, or a paused etcd leader, may hold it for seconds).
const beginAttemptTimeout = 5 * time.Second

// awaitAttemptTimeout bounds a Cancel that may wait for its call's
// record to appear (AwaitRecord): the coordinator waits up to as long as
// a Begin may take to commit, and answers unknown if none does. Bounded
// as a read, a cancel whose record did not appear went unanswered, and
// the gateway redialled a healthy link four times over (seen in the
// fault harness's logs).
const awaitAttemptTimeout = beginAttemptTimeout + attemptTimeout

// awaitsRecord reports whether args is a Cancel that may wait for its
// call's record.
func awaitsRecord(args any) bool {
	r, ok := args.(*pb.CancelRequest)
	return ok && r.GetAwaitRecord()
}

// unansweredAfter is how long an attempt must have waited, when it ends
// at a deadline, for its silence to count against the link: a caller
// that allows less (the probe allows probeTimeout in all) still finds
// the link dead, and one that allows a few milliseconds does not.
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
		gen := c.conn.Gen()
		unanswered, err := c.attempt(ctx, method, args, reply, opts)
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

// attempt makes one bounded attempt and reports whether it went
// unanswered.
func (c *coordConn) attempt(ctx context.Context, method string, args, reply any, opts []grpc.CallOption) (bool, error) {
	bound := attemptTimeout
	switch {
	case method == pb.CoordinatorService_Begin_FullMethodName:
		bound = beginAttemptTimeout
	case awaitsRecord(args):
		bound = awaitAttemptTimeout
	}
	actx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	err := c.conn.Invoke(actx, method, args, reply, opts...)
	unanswered := status.Code(err) == codes.DeadlineExceeded && actx.Err() != nil && time.Since(start) >= unansweredAfter
	return unanswered, err
}

// retireGrace is how long what rides a replaced connection may go on
// there: as long as the longest bounded attempt. A link is taken for
// half-dead on one unanswered attempt, which may only have been slow (a
// Begin while an etcd leader is elected); closing the connection at once
// failed every other Begin on it, answered or not, as "could not start"
// (seen in the fault harness). Streams on it (the tool and notification
// watches) end with it and open again on the fresh one.
const retireGrace = beginAttemptTimeout

// redial replaces connection gen, if it is still the current one.
func (c *coordConn) redial(gen uint64, method string) {
	replaced, err := c.conn.RedialAfter(gen, retireGrace)
	switch {
	case replaced:
		c.log.Warn("the link to the coordinators is half-dead; redialled", "why", "an attempt went unanswered", "method", method)
	case err != nil && !errors.Is(err, dial.ErrClosed):
		c.log.Error("redialling the coordinators", "err", err)
	}
}

// NewStream implements grpc.ClientConnInterface on the current connection.
// A Start (the placement, then the record's Begin) is bounded as a Begin
// is, message by message, and never sent twice.
func (c *coordConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method != pb.CoordinatorService_Start_FullMethodName {
		return c.conn.NewStream(ctx, desc, method, opts...)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &boundedStream{c: c, gen: c.conn.Gen(), cancel: cancel, method: method}
	s.t = time.AfterFunc(beginAttemptTimeout, s.expire)
	cs, err := c.conn.NewStream(ctx, desc, method, opts...)
	if err != nil {
		s.t.Stop()
		cancel()
		return nil, s.fault(err)
	}
	s.ClientStream = cs
	return s, nil
}

// boundedStream is a server stream whose every message must come within
// beginAttemptTimeout of the one before (or of its start): one that does
// not finds the link half-dead, as an unanswered Begin does.
type boundedStream struct {
	grpc.ClientStream
	c      *coordConn
	gen    uint64
	method string
	cancel context.CancelFunc
	t      *time.Timer

	mu      sync.Mutex
	expired bool
}

func (s *boundedStream) expire() {
	s.mu.Lock()
	s.expired = true
	s.mu.Unlock()
	s.cancel()
}

// fault is what the caller gets of err: errUnanswered, after a redial,
// when the stream went quiet past its bound.
func (s *boundedStream) fault(err error) error {
	s.mu.Lock()
	expired := s.expired
	s.mu.Unlock()
	if err == nil || !expired {
		return err
	}
	s.c.redial(s.gen, s.method)
	return errUnanswered
}

func (s *boundedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.t.Stop()
		s.cancel()
		return s.fault(err)
	}
	if r, ok := m.(*pb.StartResponse); ok && (r.GetBegun() != nil || r.GetPlaced().GetFence() != 0) {
		s.t.Stop() // Start's last message
		return nil
	}
	s.t.Reset(beginAttemptTimeout)
	return nil
}
