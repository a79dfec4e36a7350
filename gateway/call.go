package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// cancelTimeout bounds one Cancel round trip to the coordinator.
const cancelTimeout = 10 * time.Second

// call is one request routed to a worker (tools/call, resources/read,
// prompts/get, ...), in flight from registration to its end.
type call struct {
	s        *session
	id       jsonrpc.ID
	method   string // the MCP method
	target   string // what it names: a tool, resource URI, prompt, completion reference
	reply    sink
	token    json.RawMessage // the client's progress token, if any
	rev2026  bool            // 2026-07-28: results say resultType
	logLevel string          // 2026-07-28: the request's own log level; none means no logs
	scopes   []string        // the scopes the caller's token granted, for the handler
	span     trace.Span      // the request's span, nil when not traced (trace.go)

	gate gate // what may go out to the client (gate.go)
	hold hold // what waits for the call's record (beside.go)

	mu       sync.Mutex
	begun    *pb.BeginResponse // nil until placed, and while placed again; its placement is moved to placement
	timeout  time.Duration     // as granted by the coordinator, for the timeout's message
	stopExec context.CancelFunc
	// completed, while it executes, tells its quiet-stream watch the call
	// COMPLETED; knownCompleted says the gateway learnt so.
	completed      func()
	knownCompleted bool
	retried        bool // the call was placed once more after its worker was lost
	// handlerStopped says its worker was told the caller is gone
	// (stopHandler).
	handlerStopped bool
	// placement is the call as its coordinator placed it beside its work,
	// until Begun says its record is durable and gives fence instead:
	// decisions then name the record, and the placement (about 500
	// bytes) does not stay for the call's life. Read through ref.
	placement []byte
	fence     int64

	children childRequests // requests toward the client (outbound.go)
}

func (c *call) idText() string { b, _ := json.Marshal(c.id); return string(b) }

// handleCall runs a request routed to a worker to its end: registered
// before any remote work, begun at the coordinator, executed on the
// worker, answered through the gate.
func (s *session) handleCall(ctx context.Context, m *jsonrpc.Message, params *inParams, reply sink) {
	p, perr := parseRouted(m, params)
	if perr != nil {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, perr))
		return
	}
	if p.method == "tools/call" && s.maybeTask(ctx, m, p, reply) {
		return // a task: answered with CreateTaskResult, or refused (tasks.go)
	}
	c := &call{s: s, id: m.ID, method: p.method, target: p.target, reply: reply, rev2026: s.speaks2026(),
		logLevel: p.logLevel, scopes: identityFrom(ctx).Scopes, token: p.token,
		span: requestSpan(ctx)}
	c.children.caps = s.capabilitiesFor(params)
	if e := c.openRound(params, p); e != nil {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, e))
		return
	}
	early, err := s.register(c)
	if err != nil {
		s.g.metrics.call(p.metricName(), outcomeRejected)
		reply.send(jsonrpc.ErrorResponse(m.ID, true, err))
		return
	}
	defer s.unregister(c)
	if early != nil {
		c.requestCancel(early.who, early.reason) // sent once Begin returns
	}
	c.run(p)
	s.endChildren(c)
	// The response is on the wire before the call counts as done, so a
	// shutdown that waits for calls closes no stream ahead of an answer.
	reply.flush()
	outcome := c.gate.ended()
	if outcome != "" {
		s.g.metrics.call(p.metricName(), outcome)
	}
	observeOutcome(ctx, outcome)
}

func (c *call) run(p *routed) {
	beginID := randid.New(16)
	begun, st, err := c.begin(p, beginID)
	if err != nil {
		c.beginFailed(err, p, beginID)
		return
	}
	c.placed(begun)
	// The coordinator may grant less time than asked (it caps deadlines).
	timeout := begun.GetTimeout().AsDuration()
	c.mu.Lock()
	c.placement, c.fence, begun.Placement = begun.GetPlacement(), 0, nil // shared from here on: read through ref
	c.begun = begun
	c.timeout = timeout
	c.mu.Unlock()
	var recorded chan struct{}
	if st != nil {
		// Executed while its record is written: shown once it is.
		c.hold.shutUntilRelease()
		recorded = make(chan struct{})
		go func(st *started) { // owned: run waits for recorded
			defer close(recorded)
			c.awaitRecord(st, begun)
		}(st) // not captured: the stream is garbage once it has answered
		st = nil
		defer func() { <-recorded }()
	} else if pending := c.gate.begin(); pending != nil && c.sendCancel(pending) {
		return
	}
	timer := time.AfterFunc(time.Until(begun.GetDeadline().AsTime()), func() {
		c.requestCancel(pb.Initiator_INITIATOR_TIMEOUT, fmt.Sprintf("timed out after %v", timeout))
	})
	defer timer.Stop()
	for {
		lost := c.execute(p, begun)
		if lost == "" {
			return
		}
		if recorded != nil {
			<-recorded // the lost call's record first: a retry replaces it
		}
		next := c.retry(p, begun)
		if next == nil {
			c.respond(c.failure("%s", lost))
			return
		}
		if c.settled() {
			return // cancelled while it was placed again
		}
		begun = next
	}
}

// retry places a call that failed because its worker was lost once more,
// on another worker, if the worker vouched that the tool is idempotent,
// nothing of the call reached the client, and nobody asked to cancel it.
// The coordinator checks the rest: the call failed with its worker lost,
// is not a retry itself, and is not past its deadline. retry returns the
// new call, or nil.
func (c *call) retry(p *routed, lost *pb.BeginResponse) *pb.BeginResponse {
	g := c.s.g
	deadline := lost.GetDeadline().AsTime()
	c.mu.Lock()
	retried := c.retried
	c.mu.Unlock()
	// Until the retry exists, a cancel waits in the gate.
	// A call that resumes a parked one is never placed elsewhere: the
	// parked work was on the lost worker.
	if !lost.GetIdempotent() || retried || c.children.roundTrip.pin != "" || !time.Now().Before(deadline) || !c.gate.replace() {
		return nil
	}
	c.mu.Lock()
	c.retried, c.begun, c.stopExec, c.handlerStopped, c.placement, c.fence = true, nil, nil, false, nil, 0
	c.mu.Unlock()
	c.hold.reopen() // still shut if the lost worker left before the record
	ctx, cancel := context.WithDeadline(c.traced(g.base), deadline)
	defer cancel()
	beginID := randid.New(16)
	begun, err := g.coord.Begin(ctx, &pb.BeginRequest{
		Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}, Tool: p.target, Method: p.beginMethod(),
		Principal: c.s.principal, Gateway: g.opts.Name, Timeout: durationpb.New(time.Until(deadline)),
		RetryOf: lost.GetCallId(), BeginId: beginID,
	})
	if err != nil {
		g.log.Warn("a call lost with its worker could not be placed again", "scope", c.s.scope, "method", p.method, "target", p.target, "call", lost.GetCallId(), "err", err)
		switch client.Kind(err) {
		case client.ErrNotRetryable, client.ErrNoCapacity, client.ErrUnknownTool, client.ErrInvalidArgument:
		default:
			c.abandonBegin(beginID) // the retry may exist though its reply was lost
		}
		c.setOutcome(outcomeFailed)
		return nil
	}
	g.log.Info("placed a call lost with its worker on another worker", "scope", c.s.scope, "method", p.method, "target", p.target,
		"lost", lost.GetCallId(), "lost_worker", lost.GetWorker(), "call", begun.GetCallId(), "worker", begun.GetWorker())
	g.metrics.retry(p.metricName())
	c.mu.Lock()
	c.begun = begun
	c.mu.Unlock()
	if pending := c.gate.begin(); pending != nil {
		c.sendCancel(pending)
	}
	return begun
}

// beginFailed answers a call the coordinator would not place, unless it
// was cancelled meanwhile.
func (c *call) beginFailed(err error, p *routed, beginID string) {
	tool := p.target
	if c.pinnedGone(err) { // park.go
		return
	}
	c.setOutcome(outcomeRejected)
	switch client.Kind(err) {
	case client.ErrUnknownTool:
		c.respond(jsonrpc.ErrorResponse(c.id, true, p.unknown(c.rev2026)))
	case client.ErrSessionClosed:
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the session was closed; initialize a new one")))
	case client.ErrDuplicate:
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "request id %s is already in flight", c.idText())))
	case client.ErrNoCapacity:
		c.respond(c.failure("every worker offering %s is busy; try again shortly", tool))
	case client.ErrInvalidArgument:
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the call could not be started: %s", status.Convert(err).Message())))
	default:
		// The coordinator or etcd went away, perhaps after committing
		// the call: make sure it ends FAILED, as the client is told.
		c.s.g.log.Warn("begin failed", "scope", c.s.scope, "method", p.method, "target", tool, "err", err)
		if r := c.abandonBegin(beginID); r.GetResult() == pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED {
			// The Begin did commit, and a cancellation (the client's
			// disconnect, say) won before we could fail it: answer as
			// that decision says, which is silence for the client's own.
			c.cancelledBy(r.GetWinnerInitiator(), r.GetWinnerReason())
			return
		}
		if c.gate.clientAsked() || c.s.hasLeft() {
			// The client cancelled, or left, while Begin was in flight:
			// it expects nothing. A call the Begin created after all is
			// settled by the client's end (its scope's cancel) or, past
			// its deadline, by the janitor.
			c.cancelledBy(pb.Initiator_INITIATOR_CLIENT, "")
			return
		}
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the call could not be started: %s", status.Convert(err).Message())))
	}
}

// abandonBegin settles a Begin whose reply was lost, which may yet commit
// (a replica that was paused holds it in its queue): the coordinator
// either keeps it from ever committing or, if it did, fails its call, so
// that nothing (a session's close, the janitor at the deadline) settles it
// otherwise after the client was told it could not start. It tries a few
// times while the coordinators come back; should none answer, a Begin
// that commits after all leaves its call to the janitor, which fails it
// past its deadline.
//
// It returns the coordinator's answer: whether the Begin (or a decision
// that created the call's record) committed, and if so whether the
// abandonment's failure won or which decision stands; nil if none
// answered.
func (c *call) abandonBegin(beginID string) *pb.AbandonBeginResponse {
	g := c.s.g
	req := &pb.AbandonBeginRequest{
		Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}, BeginId: beginID,
		Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "the gateway lost Begin's reply and told the client the call could not start",
	}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for range 4 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.traced(g.base)), cancelTimeout)
		got, err := g.coord.AbandonBegin(ctx, req)
		cancel()
		switch {
		case err == nil:
			return got
		case client.Is(err, client.ErrInvalidArgument) || client.Is(err, client.ErrUnknownCall):
			return &pb.AbandonBeginResponse{} // never begun (or it ended otherwise, long ago)
		}
		g.log.Warn("abandoning a Begin whose reply was lost", "scope", c.s.scope, "begin", beginID, "err", err)
		if retry.Wait(g.base) != nil {
			return nil
		}
	}
	return nil
}

// execute streams the call from its worker and relays what comes back.
// When the call failed because its worker was lost, it answers nothing
// and returns the error the client should get, unless the call is retried.
func (c *call) execute(p *routed, begun *pb.BeginResponse) (lost string) {
	g := c.s.g
	wc, err := g.workerClient(begun.GetWorkerAddress())
	if err != nil {
		return c.lost(begun, err)
	}
	// The stream is bounded: a worker that goes silent past the call's
	// deadline (and the cancel that the deadline sends) is lost.
	ctx, stop := context.WithDeadline(c.traced(g.base), begun.GetDeadline().AsTime().Add(g.opts.ExecuteGrace))
	defer stop()
	c.mu.Lock()
	c.stopExec = stop
	c.mu.Unlock()
	// Watched from before the stream opens: a fresh connection to a worker
	// gone silent never completes its handshake, and Execute waits for it.
	heard, completed, endWatch := c.watchQuiet(begun, stop)
	defer endWatch()
	c.mu.Lock()
	c.completed = completed
	known := c.knownCompleted
	c.mu.Unlock()
	if known {
		completed()
	}
	ref := c.ref(begun)
	stream, err := wc.Execute(ctx, &pb.ExecuteRequest{
		CallId: ref.GetCallId(), Fence: ref.GetFence(), Placement: ref.GetPlacement(), Tool: p.target, ArgumentsJson: p.arguments,
		Method: p.beginMethod(), ParamsJson: p.params,
		Deadline: begun.GetDeadline(), Progress: c.token != nil,
		Worker: begun.GetWorker(), Principal: c.s.principal, Scopes: c.scopes,
		Session: c.sessionKey(), LogLevel: c.wantedLevel(),
		ClientCapabilitiesJson: c.children.caps, Scope: c.s.scope, InputResponses: c.children.roundTrip.inputs,
		Resume: c.children.roundTrip.resume,
	})
	if err != nil {
		return c.lost(begun, err)
	}
	// Until it hears the worker's headers (sent as it takes the call),
	// gRPC keeps the request for a retry: the call's arguments and
	// placement, for as long as the call runs quietly. An error here is
	// the stream's, which Recv returns.
	stream.Header()
	for {
		ev, err := stream.Recv()
		heard()
		if err != nil {
			if c.settled() || g.base.Err() != nil {
				return "" // we closed the stream after a cancel won, or are shutting down
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the worker ended the call without an outcome")
			}
			return c.lost(begun, err)
		}
		// Progress, logs and requests toward the client wait for the
		// call's record (hold); its decision is durable in itself, and
		// lets out first what was held.
		switch e := ev.GetEvent().(type) {
		case *pb.ExecuteResponse_Progress:
			c.hold.run(func() { c.progress(e.Progress) }, true)
			continue
		case *pb.ExecuteResponse_Log:
			c.hold.run(func() { c.log(e.Log) }, true)
			continue
		case *pb.ExecuteResponse_Notification:
			c.hold.run(func() { c.notify(e.Notification) }, false) // events.go
			continue
		case *pb.ExecuteResponse_ClientRequest:
			c.hold.run(func() { c.askClient(wc, begun, e.ClientRequest) }, false)
			continue
		case *pb.ExecuteResponse_ClientRequestEnd:
			c.hold.run(func() { c.clientRequestEnded(begun.GetCallId(), e.ClientRequestEnd) }, false)
			continue
		case *pb.ExecuteResponse_TaskStart:
			c.hold.run(func() { c.startTask(wc, begun, p, e.TaskStart) }, false) // tasks_start.go
			continue
		}
		c.hold.release()
		switch e := ev.GetEvent().(type) {
		case *pb.ExecuteResponse_Result:
			c.noteSubscription(e.Result)
			c.answer(e.Result)
			return ""
		case *pb.ExecuteResponse_Failed:
			c.setOutcome(outcomeFailed)
			msg := c.failedText()
			if r := e.Failed.GetReason(); r != "" {
				msg += ": " + r
			}
			if e.Failed.GetInitiator() == pb.Initiator_INITIATOR_WORKER_LOST {
				return msg
			}
			c.respond(c.failure("%s", msg))
			return ""
		case *pb.ExecuteResponse_Cancelled:
			c.cancelledBy(e.Cancelled.GetInitiator(), e.Cancelled.GetReason())
			return ""
		}
	}
}

// workerLost is what the client is told of a call that failed because the
// gateway lost its worker.
const workerLost = "the worker running this call was lost"

// resultLost is what the client is told of a call that COMPLETED when its
// result did not reach the gateway.
const resultLost = "the tool completed but its result was lost on the way back"

// lost settles a call whose worker the gateway cannot reach: Fail decides
// it against a late Complete, and the client learns what won. When the
// call ends FAILED it answers nothing and returns the client's error, so
// that the call may be retried instead.
func (c *call) lost(begun *pb.BeginResponse, cause error) string {
	g := c.s.g
	c.setOutcome(outcomeFailed)
	c.mu.Lock()
	known := c.knownCompleted
	c.mu.Unlock()
	if known { // a cancel of ours lost to its completion: no Fail can win
		c.respond(c.failure(resultLost))
		return ""
	}
	unrecorded := c.ref(begun).GetFence() == 0 // begun beside its work, its record never written
	resp, err := c.fail(begun, pb.Initiator_INITIATOR_WORKER_LOST, "execute stream lost: "+status.Convert(cause).Message())
	switch {
	case err != nil && unrecorded:
		// Nothing recorded it, and the failure could not either (a
		// coordinator of a release before decisions by placement, which
		// finds no such call, say): the client is told it never started,
		// as when its Begin fails. Nothing of it was shown, and its
		// Execute stream has ended, so its handler stops.
		g.log.Error("cannot record a lost call that was never recorded", "call", begun.GetCallId(), "err", err)
		c.respond(c.notStarted(err))
	case err != nil:
		// Its outcome is unknown, so it must not run again.
		g.log.Error("cannot record a lost call", "call", begun.GetCallId(), "err", err)
		c.respond(c.failure(workerLost))
	case resp.GetResult() == pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED:
		c.cancelledBy(resp.GetWinnerInitiator(), resp.GetWinnerReason())
	case resp.GetResult() == pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED:
		c.respond(c.failure(resultLost))
	default:
		return workerLost
	}
	return ""
}
