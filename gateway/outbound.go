package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// Requests toward the client (docs/design.md §10). A worker's handler asks
// the call's client something (sampling, elicitation, roots): the worker
// sends a ClientRequest event up the call's Execute stream; the gateway
// issues it under its own id, keeps it in the session's outbound
// registry, and writes it where the call's answer goes (the call's POST
// stream, or stdout). The client's answer, POSTed to any replica, goes
// straight to the worker with WorkerService.Answer; the worker decides
// once between the answer and its handler withdrawing the request, and
// says which on the stream. A withdrawn request, and every request still
// pending when its call ends, is cancelled at the client.

// outboundPrefix starts every id the gateway issues toward a client for
// a call: outboundPrefix + call id + "-" + the request's number in the
// call. Call ids are unique, so the ids are unique in the session, and
// any replica can tell from an answer's id which call it belongs to.
const outboundPrefix = "mcpcancel-"

// outReq is a request toward the client awaiting its answer.
type outReq struct {
	c      *call
	id     jsonrpc.ID
	callID string
	seq    int64
	wc     pb.WorkerServiceClient
}

// childRequests are a call's requests toward its client: the audit names
// them its child requests.
type childRequests struct {
	caps json.RawMessage // the capabilities the client declared
	wg   sync.WaitGroup  // refusals on their way to the worker

	tool      string          // 2026-07-28: what requestState is bound to (mrtr.go)
	args      json.RawMessage //
	roundTrip roundTrip       // 2026-07-28 multi round-trip requests (mrtr.go)

	mu  sync.Mutex
	log []*pb.ChildRequest // the call's requests toward its client, for its audit
}

// note records a request toward the client, or how it ended; outcome ""
// is pending.
func (t *childRequests) note(seq int64, method, outcome string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.log {
		if c.Seq == seq {
			c.Outcome = outcome
			if method != "" {
				c.Method = method
			}
			return
		}
	}
	t.log = append(t.log, &pb.ChildRequest{Seq: seq, Method: method, Outcome: outcome})
}

// children are the call's requests toward its client as the gateway saw
// them, for the audit record of a cancel it asks for: those still
// pending are cancelled with the call.
func (t *childRequests) records() []*pb.ChildRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*pb.ChildRequest, 0, len(t.log))
	for _, c := range t.log {
		o := c.Outcome
		if o == "" {
			o = "cancelled"
		}
		out = append(out, &pb.ChildRequest{Seq: c.Seq, Method: c.Method, Outcome: o})
	}
	return out
}

func outboundID(callID string, seq int64) jsonrpc.ID {
	return jsonrpc.String(outboundPrefix + callID + "-" + strconv.FormatInt(seq, 10))
}

// parseOutboundID returns the call and number an id of ours names.
func parseOutboundID(id jsonrpc.ID) (callID string, seq int64, ok bool) {
	rest, ok := strings.CutPrefix(id.Str(), outboundPrefix)
	if !id.IsString() || !ok {
		return "", 0, false
	}
	callID, n, ok := strings.Cut(rest, "-")
	if !ok || len(callID) != 32 {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	return callID, seq, err == nil && seq > 0
}

// capabilitiesFor returns the capabilities the client declared for a
// request: in initialize (2025), or in the request's own _meta (2026).
func (s *session) capabilitiesFor(params *inParams) json.RawMessage {
	if s.speaks2026() {
		if !envelopeOf(params).hasCaps {
			return nil
		}
		return params.Meta.ClientCaps
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientCaps
}

// askClient issues a worker's request toward the client. It never waits
// on the network: the request is queued on the call's sink, and a
// refusal travels to the worker on its own goroutine.
func (c *call) askClient(wc pb.WorkerServiceClient, begun *pb.BeginResponse, r *pb.ClientRequest) {
	callID, seq := begun.GetCallId(), r.GetSeq()
	if c.rev2026 {
		c.parkForInput(wc, begun, r)
		return
	}
	c.children.note(seq, r.GetMethod(), "")
	if _, ok := mcpspec.Declared(c.children.caps, r.GetMethod(), r.GetParamsJson()); !ok {
		c.refuse(wc, callID, seq, jsonrpc.CodeMethodNotFound, "the client did not declare the capability "+r.GetMethod()+" needs")
		return
	}
	if !c.reply.streams() {
		c.refuse(wc, callID, seq, jsonrpc.CodeInternalError, "the client cannot hear requests: it asked for a JSON response, not a stream")
		return
	}
	o := &outReq{c: c, id: outboundID(callID, seq), callID: callID, seq: seq, wc: wc}
	s := c.s
	s.mu.Lock()
	if s.childByID == nil {
		s.childByID = map[string]*outReq{}
	}
	s.childByID[o.id.Key()] = o
	s.mu.Unlock()
	ok := c.gate.relay(func() bool {
		return c.reply.send(jsonrpc.Request(o.id, r.GetMethod(), json.RawMessage(r.GetParamsJson())))
	})
	if !ok {
		s.dropOutbound(o)
		c.refuse(wc, callID, seq, jsonrpc.CodeInternalError, "the call is ending; nothing more reaches its client")
	}
}

// refuse answers a request toward the client with an error, without
// asking the client.
func (c *call) refuse(wc pb.WorkerServiceClient, callID string, seq int64, code int, msg string) {
	c.children.note(seq, "", "refused")
	req := &pb.AnswerRequest{CallId: callID, Scope: c.s.scope, Seq: seq,
		Answer: &pb.AnswerRequest_Error{Error: &pb.ClientError{Code: int64(code), Message: msg}}}
	c.children.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.s.g.base), cancelTimeout)
		defer cancel()
		wc.Answer(ctx, req)
	})
}

func (s *session) dropOutbound(o *outReq) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.childByID[o.id.Key()] != o {
		return false
	}
	delete(s.childByID, o.id.Key())
	return true
}

// isOutbound says whether id names a request this gateway sent the
// client (or could have: a cancel naming one is the wrong direction).
func (s *session) isOutbound(id jsonrpc.ID) bool {
	s.mu.Lock()
	_, ok := s.childByID[id.Key()]
	s.mu.Unlock()
	_, _, ours := parseOutboundID(id)
	_, _, asked := client.ParseSessionRequestID(id.Str())
	return ok || ours || id.IsString() && asked
}

// clientRequestEnded handles the worker's word that a request ended. A
// withdrawn one is cancelled at the client, naming the gateway's id.
func (c *call) clientRequestEnded(callID string, e *pb.ClientRequestEnd) {
	s := c.s
	id := outboundID(callID, e.GetSeq())
	s.mu.Lock()
	o := s.childByID[id.Key()]
	s.mu.Unlock()
	if o == nil || o.c != c || !s.dropOutbound(o) {
		return
	}
	if e.GetOutcome() == pb.ClientRequestOutcome_CLIENT_REQUEST_OUTCOME_WITHDRAWN {
		c.children.note(e.GetSeq(), "", "withdrawn")
		c.cancelAtClient(o, e.GetReason())
		return
	}
	c.children.note(e.GetSeq(), "", "answered")
}

// cancelAtClient withdraws a request toward the client. A client that
// cancelled the call stopped reading its stream (an HTTP client closes
// it), so the withdrawal goes on the session's own stream if it has one;
// otherwise, and while the call runs, on the call's stream.
func (c *call) cancelAtClient(o *outReq, reason string) {
	params := map[string]any{"requestId": o.id}
	if reason != "" {
		params["reason"] = reason
	}
	msg := jsonrpc.Notification("notifications/cancelled", params)
	if c.gate.clientAsked() && c.s.notify(msg) {
		return
	}
	c.reply.send(msg)
}

// endChildren cancels at the client every request of the call still
// pending when the call ends, however it ended.
func (s *session) endChildren(c *call) {
	c.children.wg.Wait()
	s.mu.Lock()
	var ended []*outReq
	for k, o := range s.childByID {
		if o.c == c {
			ended = append(ended, o)
			delete(s.childByID, k)
		}
	}
	s.mu.Unlock()
	for _, o := range ended {
		c.cancelAtClient(o, "the call ended")
	}
}

// answered delivers a client's response to a request toward it, to the
// worker of the call it belongs to, wherever that call runs. Answers to
// requests that are unknown, withdrawn or cancelled are ignored.
func (s *session) answered(m *jsonrpc.Message) {
	s.mu.Lock()
	o := s.childByID[m.ID.Key()]
	s.mu.Unlock()
	if o != nil {
		s.deliver(o.wc, o.callID, o.seq, m)
		return
	}
	if m.ID.IsString() && s.answerSession(m.ID.Str(), m) { // asksession.go
		return
	}
	callID, seq, ok := parseOutboundID(m.ID)
	if !ok || !s.remoteCalls() {
		return // not ours, or no other replica can hold the call
	}
	if s.lookups.take(false) != tokenTaken {
		return
	}
	wc := s.remoteWorker(callID)
	s.lookups.done(wc != nil && s.deliver(wc, callID, seq, m)) // one that found its request was worth its lookup
}

// remoteWorker finds the worker running a call of this session that
// another replica holds.
func (s *session) remoteWorker(callID string) pb.WorkerServiceClient {
	ctx, cancel := context.WithTimeout(s.g.base, cancelTimeout)
	defer cancel()
	got, err := s.g.coord.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: callID}})
	if err != nil || got.GetCall().GetKey().GetScope() != s.scope || got.GetCall().GetState() != pb.CallState_CALL_STATE_RUNNING {
		return nil
	}
	return s.workerNamed(got.GetCall().GetWorker()) // asksession.go
}

// deliver hands an answer to the worker; it reports whether the handler
// took it.
func (s *session) deliver(wc pb.WorkerServiceClient, callID string, seq int64, m *jsonrpc.Message) bool {
	req := answerRequest(m)
	req.CallId, req.Scope, req.Seq = callID, s.scope, seq
	ctx, cancel := context.WithTimeout(s.g.base, cancelTimeout)
	defer cancel()
	resp, err := wc.Answer(ctx, req)
	if err != nil {
		s.g.log.Warn("could not deliver a client's answer to its worker", "scope", s.scope, "call", callID, "err", err)
		return false
	}
	return resp.GetAccepted()
}

// answerRequest carries a client's answer, a result or an error, to a
// worker.
func answerRequest(m *jsonrpc.Message) *pb.AnswerRequest {
	req := &pb.AnswerRequest{}
	if m.Error != nil {
		req.Answer = &pb.AnswerRequest_Error{Error: &pb.ClientError{Code: int64(m.Error.Code), Message: m.Error.Message, DataJson: m.Error.Data}}
	} else {
		result := m.Result
		if len(result) == 0 {
			result = json.RawMessage(`{}`)
		}
		req.Answer = &pb.AnswerRequest_ResultJson{ResultJson: result}
	}
	return req
}

// initializeCapabilities returns the capabilities an initialize request
// declares, for the session's record.
func initializeCapabilities(params json.RawMessage) []byte {
	var p initializeParams
	if json.Unmarshal(params, &p) != nil || !json.Valid(p.Capabilities) {
		return nil
	}
	return p.Capabilities
}
