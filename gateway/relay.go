package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// What a call lets out through its gate: its one response, and progress
// and logs while it runs, each encoded in the client's revision.

// respond queues the call's one response, if the gate is still open. The
// sink only queues: the write happens on the stream's own goroutine, with
// a deadline, so no lock is held across it.
func (c *call) respond(msg []byte) bool { return c.gate.respond(c.reply, msg) }

// setOutcome records how the call ended, while its gate is open.
func (c *call) setOutcome(o string) { c.gate.setOutcome(o) }

// settled says whether the call's gate has closed.
func (c *call) settled() bool { return c.gate.settled() }

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
	c.gate.relay(func() bool { return c.reply.sendLatest("progress/"+string(c.token), msg) })
}

// log relays a worker's log message while the call runs and the
// session's level lets it through.
func (c *call) log(l *pb.LogMessage) {
	if c.rev2026 && !mcpspec.LevelPasses(l.GetLevel(), c.logLevel) || !c.rev2026 && !c.s.logs(l.GetLevel()) {
		return
	}
	params := map[string]any{"level": l.GetLevel(), "data": json.RawMessage(l.GetDataJson())}
	if l.GetLogger() != "" {
		params["logger"] = l.GetLogger()
	}
	msg := jsonrpc.Notification("notifications/message", params)
	c.gate.relay(func() bool { return c.reply.send(msg) })
}

// result encodes the call's response, in the client's revision.
func (c *call) result(v any) []byte {
	if raw, ok := v.(json.RawMessage); ok {
		return c.rawResult(raw)
	}
	if !c.rev2026 {
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
	if c.rev2026 && !appendComplete(buf, start, c.method) {
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
	cache := mcpspec.Cacheable(method)
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
