package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

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

type cancelOrder struct {
	who    pb.Initiator
	reason string
}

// requestCancel asks for the call to be cancelled. Before Begin has
// returned it is remembered and sent once the call exists. It reports
// false when the call's answer has already gone out and no cancel was
// sent for it: this one lost, and only the coordinator can record that
// (the call stays in its session until the answer is written, so such a
// cancel can still find it here).
func (c *call) requestCancel(who pb.Initiator, reason string) bool {
	o, lost := c.markCancel(who, reason)
	if o != nil {
		c.sendCancel(o)
	}
	return !lost
}

// markCancel is requestCancel's decision, without its RPC: it returns the
// order to send now (nil when there is none: another is pending, the call
// has not begun yet, or it is settled), and whether the call's answer went
// out before any cancel.
func (c *call) markCancel(who pb.Initiator, reason string) (send *cancelOrder, lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if who == pb.Initiator_INITIATOR_CLIENT {
		c.ownCancel = true
	}
	if c.state != running || c.pending != nil {
		return nil, c.state == answered && c.pending == nil // with a cancel pending, the coordinator has heard one
	}
	o := &cancelOrder{who: who, reason: reason}
	c.pending, c.state = o, cancelling
	if c.begun == nil {
		return nil, false // sent once the call exists
	}
	return o, false
}

// sendCancel asks the coordinator; it reports whether the cancel won.
func (c *call) sendCancel(o *cancelOrder) bool {
	g := c.s.g
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.traced(g.base)), cancelTimeout)
	defer cancel()
	resp, err := g.coord.Cancel(ctx, &pb.CancelRequest{
		Target:    &pb.CancelRequest_Key{Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}},
		Initiator: o.who, Reason: o.reason, Principal: c.s.principal, ChildRequests: c.toward.children(),
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
		who, why := resp.GetWinnerInitiator(), resp.GetWinnerReason()
		if o.who == pb.Initiator_INITIATOR_CLIENT {
			// The client asked for the cancel and expects no answer; that
			// another cancellation got there first (its worker saw the
			// stream end, say) changes nothing for it.
			who = pb.Initiator_INITIATOR_CLIENT
		}
		c.cancelledBy(who, why)
		return true
	}
	return false // completion (or failure) won; its answer goes out
}

// clientGaveUp says the client asked to cancel the call, or left (stdio
// EOF, DELETE): nothing but a result may reach it now.
func (c *call) clientGaveUp() bool {
	c.mu.Lock()
	own := c.ownCancel
	c.mu.Unlock()
	return own || c.s.hasLeft()
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
// would break the one rule that cannot be mended later. So is any
// cancellation once the client asked to cancel or left (stdio EOF,
// DELETE): which cancel was recorded first changes nothing for it.
func (c *call) cancelledBy(who pb.Initiator, reason string) {
	if c.clientGaveUp() {
		who = pb.Initiator_INITIATOR_CLIENT // its own doing, whoever's cancel was recorded
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
		c.respond(c.failure("the call timed out after %v and was cancelled", timeout))
	default:
		c.setOutcome(outcomeCancelled)
		c.respond(c.failure("%s", cancelledMessage(who, reason)))
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

// settled says whether the gate has closed.
func (c *call) settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.open()
}

// respond queues the call's one response, if the gate is still open. The
// sink only queues: the write happens on the stream's own goroutine, with
// a deadline, so no lock is held across it.
func (c *call) respond(msg []byte) { c.respondOpen(msg) }

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
	if raw, ok := v.(json.RawMessage); ok {
		return c.rawResult(raw)
	}
	if !c.modern {
		return jsonrpc.Response(c.id, v)
	}
	return jsonrpc.Response(c.id, complete(c.method, v))
}

// rawResult encodes a worker's result as the call's response without
// decoding it: the result is compacted (which validates it) straight into
// the response, and for 2026-07-28 marked complete by appending
// resultType (and a cacheable method's hints) to the object. A result
// that already names one of those keys is decoded and re-encoded with
// ours instead, as completeRaw does; one that is not JSON is answered as
// an internal error.
func (c *call) rawResult(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	id, _ := c.id.MarshalJSON()
	buf := bytes.NewBuffer(make([]byte, 0, len(raw)+len(id)+96))
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.Write(id)
	buf.WriteString(`,"result":`)
	start := buf.Len()
	if err := json.Compact(buf, raw); err != nil {
		c.s.g.log.Warn("a worker's result is not JSON", "scope", c.s.scope, "id", c.idText(), "err", err)
		return jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the worker answered with a result that does not decode"))
	}
	if c.modern && !appendComplete(buf, start, c.method) {
		return jsonrpc.Response(c.id, completeRaw(c.method, raw))
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// appendComplete adds resultType, and a cacheable method's caching hints,
// to the compact result object that ends buf from start. It reports false,
// leaving buf as it was, when the result names one of those keys itself.
// A result that is not an object stays as it is, as completeRaw leaves it.
func appendComplete(buf *bytes.Buffer, start int, method string) bool {
	obj := buf.Bytes()[start:]
	if obj[0] != '{' {
		return true
	}
	cache := slices.Contains(cacheable, method)
	if bytes.Contains(obj, []byte(`"resultType"`)) || cache && (bytes.Contains(obj, []byte(`"ttlMs"`)) || bytes.Contains(obj, []byte(`"cacheScope"`))) {
		return false
	}
	empty := len(obj) == 2
	buf.Truncate(buf.Len() - 1) // the object's closing brace
	if !empty {
		buf.WriteByte(',')
	}
	buf.WriteString(`"resultType":"complete"`)
	if cache {
		buf.WriteString(`,"ttlMs":0,"cacheScope":"private"`)
	}
	buf.WriteByte('}')
	return true
}

// toolError is a CallToolResult with isError set.
func toolError(format string, args ...any) map[string]any {
	return map[string]any{
		"content": []map[string]any{{"type": "text", "text": fmt.Sprintf(format, args...)}},
		"isError": true,
	}
}
