package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// cancelTimeout bounds one Cancel round trip to the coordinator.
const cancelTimeout = 10 * time.Second

// Gate states. A call leaves running (or cancelling) exactly once: to
// answered when its one response is queued, or to cancelled when the
// client's own cancellation won, after which nothing goes out. From the
// moment the gateway decides to ask for a cancel the call is cancelling:
// no more progress or logs, though a result or error that wins the race
// still goes out.
const (
	running = iota
	cancelling
	answered
	cancelled
)

// call is one tools/call in flight, from registration to its end.
type call struct {
	s        *session
	id       jsonrpc.ID
	reply    sink
	token    json.RawMessage // the client's progress token, if any
	modern   bool            // 2026-07-28: results say resultType
	logLevel string          // 2026-07-28: the request's own log level; none means no logs
	scopes   []string        // the scopes the caller's token granted, for the handler

	mu       sync.Mutex
	state    int
	outcome  string // for metrics, once the gate closed
	begun    *pb.BeginResponse
	timeout  time.Duration // as granted by the coordinator, for the timeout's message
	pending  *cancelOrder  // a cancel asked for before Begin returned
	stopExec context.CancelFunc
	relayed  bool // a progress or log notification of the call reached the client
	retried  bool // the call was placed once more after its worker was lost
}

type cancelOrder struct {
	who    pb.Initiator
	reason string
}

func (c *call) idText() string { b, _ := json.Marshal(c.id); return string(b) }

type callParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      struct {
		ProgressToken json.RawMessage `json:"progressToken"`
		LogLevel      string          `json:"io.modelcontextprotocol/logLevel"`
	} `json:"_meta"`
}

// handleCall runs tools/call to its end: registered before any remote
// work, begun at the coordinator, executed on the worker, answered through
// the gate.
func (s *session) handleCall(ctx context.Context, m *jsonrpc.Message, reply sink) {
	var p callParams
	if err := json.Unmarshal(m.Params, &p); err != nil || p.Name == "" {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call needs params with a tool name")))
		return
	}
	if a := p.Arguments; len(a) > 0 && string(a) != "null" && a[0] != '{' {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "arguments must be an object")))
		return
	}
	c := &call{s: s, id: m.ID, reply: reply, modern: s.isModern(), logLevel: p.Meta.LogLevel, scopes: identityFrom(ctx).Scopes}
	if t := p.Meta.ProgressToken; len(t) > 0 && (t[0] == '"' || t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
		c.token = t
	}
	if err := s.register(c); err != nil {
		s.g.metrics.call(p.Name, outcomeRejected)
		reply.send(jsonrpc.ErrorResponse(m.ID, true, err))
		return
	}
	defer s.unregister(c)
	c.run(p)
	// The response is on the wire before the call counts as done, so a
	// shutdown that waits for calls closes no stream ahead of an answer.
	reply.flush()
	c.mu.Lock()
	outcome := c.outcome
	c.mu.Unlock()
	if outcome != "" {
		s.g.metrics.call(p.Name, outcome)
	}
}

func (c *call) run(p callParams) {
	g := c.s.g
	ctx, cancel := context.WithTimeout(g.base, g.opts.CallTimeout)
	defer cancel()
	begun, err := g.coord.Begin(ctx, &pb.BeginRequest{
		Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}, Tool: p.Name,
		Principal: c.s.principal, Gateway: g.opts.Name, Timeout: durationpb.New(g.opts.CallTimeout),
	})
	if err != nil {
		c.beginFailed(err, p.Name)
		return
	}
	// The coordinator may grant less time than asked (it caps deadlines).
	timeout := begun.GetTimeout().AsDuration()
	c.mu.Lock()
	c.begun = begun
	c.timeout = timeout
	pending := c.pending
	c.mu.Unlock()
	if pending != nil && c.sendCancel(pending) {
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
		next := c.retry(p, begun)
		if next == nil {
			c.respond(c.result(toolError("%s", lost)))
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
func (c *call) retry(p callParams, lost *pb.BeginResponse) *pb.BeginResponse {
	g := c.s.g
	deadline := lost.GetDeadline().AsTime()
	c.mu.Lock()
	ok := lost.GetIdempotent() && !c.retried && !c.relayed && c.state == running && c.pending == nil && time.Now().Before(deadline)
	if ok {
		// Until the retry exists, a cancel waits in pending.
		c.retried, c.begun, c.stopExec, c.outcome = true, nil, nil, ""
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	ctx, cancel := context.WithDeadline(g.base, deadline)
	defer cancel()
	begun, err := g.coord.Begin(ctx, &pb.BeginRequest{
		Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}, Tool: p.Name,
		Principal: c.s.principal, Gateway: g.opts.Name, Timeout: durationpb.New(time.Until(deadline)),
		RetryOf: lost.GetCallId(),
	})
	if err != nil {
		g.log.Warn("a call lost with its worker could not be placed again", "scope", c.s.scope, "tool", p.Name, "call", lost.GetCallId(), "err", err)
		switch client.Kind(err) {
		case client.ErrNotRetryable, client.ErrNoCapacity, client.ErrUnknownTool, client.ErrInvalidArgument:
		default:
			c.failLostBegin() // the retry may exist though its reply was lost
		}
		c.setOutcome(outcomeFailed)
		return nil
	}
	g.log.Info("placed a call lost with its worker on another worker", "scope", c.s.scope, "tool", p.Name,
		"lost", lost.GetCallId(), "lost_worker", lost.GetWorker(), "call", begun.GetCallId(), "worker", begun.GetWorker())
	g.metrics.retry(p.Name)
	c.mu.Lock()
	c.begun = begun
	pending := c.pending
	c.mu.Unlock()
	if pending != nil {
		c.sendCancel(pending)
	}
	return begun
}

// beginFailed answers a call the coordinator would not place, unless it
// was cancelled meanwhile.
func (c *call) beginFailed(err error, tool string) {
	c.setOutcome(outcomeRejected)
	switch client.Kind(err) {
	case client.ErrUnknownTool:
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "unknown tool: %s", tool)))
	case client.ErrSessionClosed:
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the session was closed; initialize a new one")))
	case client.ErrDuplicate:
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "request id %s is already in flight", c.idText())))
	case client.ErrNoCapacity:
		c.respond(c.result(toolError("every worker offering %s is busy; try again shortly", tool)))
	case client.ErrInvalidArgument:
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the call could not be started: %s", status.Convert(err).Message())))
	default:
		// The coordinator or etcd went away, perhaps after committing
		// the call: make sure it ends FAILED, as the client is told.
		c.s.g.log.Warn("begin failed", "scope", c.s.scope, "tool", tool, "err", err)
		c.failLostBegin()
		c.respond(jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the call could not be started: %s", status.Convert(err).Message())))
	}
}

// failLostBegin fails the call if a Begin whose reply was lost created it,
// so that nothing (a session's close, the janitor at the deadline) settles
// it otherwise after the client was told it could not start. It tries a
// few times while the coordinator comes back, then leaves the call to the
// janitor, which fails it past its deadline.
func (c *call) failLostBegin() {
	g := c.s.g
	key := &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}
	for wait := 100 * time.Millisecond; wait <= time.Second; wait *= 2 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(g.base), cancelTimeout)
		got, err := g.coord.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{Key: key}})
		if err == nil {
			call := got.GetCall()
			if call.GetState() != pb.CallState_CALL_STATE_RUNNING || call.GetGateway() != g.opts.Name {
				cancel()
				return // not created, or an earlier call's record under the same id
			}
			_, err = g.coord.Fail(ctx, &pb.FailRequest{
				Call:      &pb.CallRef{CallId: call.GetCallId(), Fence: call.GetFence(), Worker: call.GetWorker()},
				Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "the gateway lost Begin's reply and told the client the call could not start",
			})
		}
		cancel()
		if err == nil || client.Is(err, client.ErrUnknownCall) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-g.base.Done():
			t.Stop()
			return
		}
	}
}

// execute streams the call from its worker and relays what comes back.
// When the call failed because its worker was lost, it answers nothing
// and returns the error the client should get, unless the call is retried.
func (c *call) execute(p callParams, begun *pb.BeginResponse) (lost string) {
	g := c.s.g
	wc, err := g.workerClient(begun.GetWorkerAddress())
	if err != nil {
		return c.lost(begun, err)
	}
	// The stream is bounded: a worker that goes silent past the call's
	// deadline (and the cancel that the deadline sends) is lost.
	ctx, stop := context.WithDeadline(g.base, begun.GetDeadline().AsTime().Add(g.opts.ExecuteGrace))
	defer stop()
	c.mu.Lock()
	c.stopExec = stop
	c.mu.Unlock()
	stream, err := wc.Execute(ctx, &pb.ExecuteRequest{
		CallId: begun.GetCallId(), Fence: begun.GetFence(), Tool: p.Name, ArgumentsJson: p.Arguments,
		Deadline: begun.GetDeadline(), Progress: c.token != nil,
		Worker: begun.GetWorker(), Principal: c.s.principal, Scopes: c.scopes,
	})
	if err != nil {
		return c.lost(begun, err)
	}
	heard, endWatch := c.watchQuiet(begun, stop)
	defer endWatch()
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
		switch e := ev.GetEvent().(type) {
		case *pb.ExecuteResponse_Progress:
			c.progress(e.Progress)
		case *pb.ExecuteResponse_Log:
			c.log(e.Log)
		case *pb.ExecuteResponse_Result:
			raw := json.RawMessage(e.Result.GetResultJson())
			c.setOutcome(resultOutcome(raw))
			c.respond(c.result(raw))
			return ""
		case *pb.ExecuteResponse_Failed:
			c.setOutcome(outcomeFailed)
			msg := "the tool failed"
			if r := e.Failed.GetReason(); r != "" {
				msg += ": " + r
			}
			if e.Failed.GetInitiator() == pb.Initiator_INITIATOR_WORKER_LOST {
				return msg
			}
			c.respond(c.result(toolError("%s", msg)))
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

// lost settles a call whose worker the gateway cannot reach: Fail decides
// it against a late Complete, and the client learns what won. When the
// call ends FAILED it answers nothing and returns the client's error, so
// that the call may be retried instead.
func (c *call) lost(begun *pb.BeginResponse, cause error) string {
	g := c.s.g
	c.setOutcome(outcomeFailed)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(g.base), cancelTimeout)
	defer cancel()
	resp, err := g.coord.Fail(ctx, &pb.FailRequest{
		Call:      &pb.CallRef{CallId: begun.GetCallId(), Fence: begun.GetFence(), Worker: begun.GetWorker()},
		Initiator: pb.Initiator_INITIATOR_WORKER_LOST, Reason: "execute stream lost: " + status.Convert(cause).Message(),
	})
	switch {
	case err != nil:
		// Its outcome is unknown, so it must not run again.
		g.log.Error("cannot record a lost call", "call", begun.GetCallId(), "err", err)
		c.respond(c.result(toolError(workerLost)))
	case resp.GetResult() == pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED:
		c.cancelledBy(resp.GetWinnerInitiator(), resp.GetWinnerReason())
	case resp.GetResult() == pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED:
		c.respond(c.result(toolError("the tool completed but its result was lost on the way back")))
	default:
		return workerLost
	}
	return ""
}

// requestCancel asks for the call to be cancelled. Before Begin has
// returned it is remembered and sent once the call exists.
func (c *call) requestCancel(who pb.Initiator, reason string) {
	c.mu.Lock()
	if c.state != running || c.pending != nil {
		c.mu.Unlock()
		return
	}
	o := &cancelOrder{who: who, reason: reason}
	c.pending, c.state = o, cancelling
	begun := c.begun
	c.mu.Unlock()
	if begun != nil {
		c.sendCancel(o)
	}
}

// sendCancel asks the coordinator; it reports whether the cancel won.
func (c *call) sendCancel(o *cancelOrder) bool {
	g := c.s.g
	ctx, cancel := context.WithTimeout(context.WithoutCancel(g.base), cancelTimeout)
	defer cancel()
	resp, err := g.coord.Cancel(ctx, &pb.CancelRequest{
		Target:    &pb.CancelRequest_Key{Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}},
		Initiator: o.who, Reason: o.reason, Principal: c.s.principal,
	})
	if err != nil {
		g.log.Warn("cancel failed", "scope", c.s.scope, "id", c.idText(), "err", err)
		c.cancelUndecided()
		return false
	}
	if o.who == pb.Initiator_INITIATOR_CLIENT {
		g.metrics.cancel(cancelResultLabel(resp.GetResult()))
	}
	switch resp.GetResult() {
	case pb.CancelResult_CANCEL_RESULT_CANCELLED:
		c.cancelledBy(o.who, o.reason)
		return true
	case pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED:
		c.cancelledBy(resp.GetWinnerInitiator(), resp.GetWinnerReason())
		return true
	}
	return false // completion (or failure) won; its answer goes out
}

// cancelUndecided reopens the gate when a cancel could not be decided (the
// coordinator was unreachable): a later cancel may try again, and the call
// runs on as before.
func (c *call) cancelUndecided() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = nil
	if c.state == cancelling {
		c.state = running
	}
}

// cancelledBy closes the gate after a cancellation won. Only the client's
// own cancellation is silent: the client asked for nothing, and gets
// nothing. Anyone else's (a timeout, a disconnect, a drained worker, an
// operator) is answered with an error result naming it, because the
// client is still waiting. A cancellation whose initiator is unknown is
// taken as the client's: answering after the client's accepted cancel
// would break the one rule that cannot be mended later. So is a
// disconnect once the client itself left (stdio EOF, DELETE).
func (c *call) cancelledBy(who pb.Initiator, reason string) {
	if who == pb.Initiator_INITIATOR_DISCONNECT && c.s.hasLeft() {
		who = pb.Initiator_INITIATOR_CLIENT // its own doing
	}
	switch who {
	case pb.Initiator_INITIATOR_CLIENT, pb.Initiator_INITIATOR_UNSPECIFIED:
		c.mu.Lock()
		if c.open() {
			c.state = cancelled
			c.outcome = outcomeCancelled
		}
		c.mu.Unlock()
	case pb.Initiator_INITIATOR_TIMEOUT:
		c.setOutcome(outcomeTimeout)
		c.mu.Lock()
		timeout := c.timeout
		c.mu.Unlock()
		c.respond(c.result(toolError("the call timed out after %v and was cancelled", timeout)))
	default:
		c.setOutcome(outcomeCancelled)
		c.respond(c.result(toolError("%s", cancelledMessage(who, reason))))
	}
	c.mu.Lock()
	stop := c.stopExec
	c.mu.Unlock()
	if stop != nil {
		stop() // the fast path: the worker sees its caller go at once
	}
}

// cancelledMessage tells a client who cancelled its call, when it was not
// the client.
func cancelledMessage(who pb.Initiator, reason string) string {
	var msg string
	switch who {
	case pb.Initiator_INITIATOR_OPERATOR:
		msg = "an operator cancelled the call"
	case pb.Initiator_INITIATOR_SHUTDOWN:
		msg = "the call was cancelled because the server running it shut down"
	case pb.Initiator_INITIATOR_DISCONNECT:
		msg = "the call was cancelled because its connection closed"
	case pb.Initiator_INITIATOR_WORKER_LOST:
		return workerLost
	default:
		msg = "the call was cancelled"
	}
	if reason != "" {
		msg += " (" + reason + ")"
	}
	return msg
}

// setOutcome records how the call ended, first writer wins, while the
// gate is still open (the outcome belongs to whoever closes it).
func (c *call) setOutcome(o string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open() && c.outcome == "" {
		c.outcome = o
	}
}

// open says whether the gate still lets a response out. Callers hold c.mu.
func (c *call) open() bool { return c.state == running || c.state == cancelling }

// resultOutcome tells a tool error result from a plain one.
func resultOutcome(raw json.RawMessage) string {
	var r struct {
		IsError bool `json:"isError"`
	}
	if json.Unmarshal(raw, &r) == nil && r.IsError {
		return outcomeToolError
	}
	return outcomeCompleted
}

// settled says whether the gate has closed.
func (c *call) settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.open()
}

// respond queues the call's one response, if the gate is still open. The
// sink only queues: the write happens on the stream's own goroutine, with
// a deadline, so no lock is held across it.
func (c *call) respond(msg []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open() {
		c.state = answered
		c.reply.send(msg)
	}
}

// progress relays a worker's progress while the call runs. Progress not
// yet written is replaced by the newer value: a slow client sees fewer
// steps, never a stalled handler.
func (c *call) progress(p *pb.Progress) {
	if c.token == nil {
		return
	}
	params := map[string]any{"progressToken": c.token, "progress": p.GetProgress()}
	if p.GetTotal() > 0 {
		params["total"] = p.GetTotal()
	}
	if p.GetMessage() != "" {
		params["message"] = p.GetMessage()
	}
	msg := jsonrpc.Notification("notifications/progress", params)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == running && c.reply.sendLatest("progress/"+string(c.token), msg) {
		c.relayed = true
	}
}

// log relays a worker's log message while the call runs and the
// session's level lets it through.
func (c *call) log(l *pb.LogMessage) {
	if c.modern && !levelPasses(l.GetLevel(), c.logLevel) || !c.modern && !c.s.logs(l.GetLevel()) {
		return
	}
	params := map[string]any{"level": l.GetLevel(), "data": json.RawMessage(l.GetDataJson())}
	if l.GetLogger() != "" {
		params["logger"] = l.GetLogger()
	}
	msg := jsonrpc.Notification("notifications/message", params)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == running && c.reply.send(msg) {
		c.relayed = true
	}
}

// result encodes the call's response, in the client's revision.
func (c *call) result(v any) []byte {
	if !c.modern {
		return jsonrpc.Response(c.id, v)
	}
	if raw, ok := v.(json.RawMessage); ok {
		return jsonrpc.Response(c.id, completeRaw(raw))
	}
	return jsonrpc.Response(c.id, complete("tools/call", v))
}

// toolError is a CallToolResult with isError set.
func toolError(format string, args ...any) map[string]any {
	return map[string]any{
		"content": []map[string]any{{"type": "text", "text": fmt.Sprintf(format, args...)}},
		"isError": true,
	}
}
