package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Requests toward the client: a handler asks the call's client to sample
// its model, to elicit input from its user, or to list its roots. Each
// request travels up the call's Execute stream; the gateway issues it to
// the client under its own id and delivers the client's answer, from
// whichever replica received it, with the Answer RPC. The worker alone
// decides, once, whether a request was answered or withdrawn.

// Errors of requests toward the client.
var (
	// ErrNotDeclared says the client did not declare the capability the
	// request needs (sampling, elicitation, elicitation.url, roots), so
	// the request was never sent.
	ErrNotDeclared = errors.New("worker: the client did not declare the capability this request needs")
	// ErrCallEnded says the call was settled, or is not running here, so
	// nothing more may reach its client.
	ErrCallEnded = errors.New("worker: the call has ended")
)

// ClientError is a JSON-RPC error the client answered a request with.
type ClientError struct {
	Code    int64
	Message string
	Data    json.RawMessage
}

func (e *ClientError) Error() string {
	return fmt.Sprintf("the client answered with error %d: %s", e.Code, e.Message)
}

// towardState is a call's requests toward its client.
type towardState struct {
	ctx   context.Context // the handler's: a request ends with its call
	caps  map[string]json.RawMessage
	scope string

	mu      sync.Mutex
	next    int64
	pending map[int64]chan answer
}

type answer struct {
	result json.RawMessage
	err    error
}

func (t *towardState) init(ctx context.Context, req *pb.ExecuteRequest) {
	t.ctx, t.scope = ctx, req.GetScope()
	if b := req.GetClientCapabilitiesJson(); len(b) > 0 {
		json.Unmarshal(b, &t.caps)
	}
}

// ClientCapabilities returns the capabilities the client declared (a
// ClientCapabilities object), or nil if it declared none.
func (c *Call) ClientCapabilities() json.RawMessage {
	if c.exec == nil || c.exec.toward.caps == nil {
		return nil
	}
	b, _ := json.Marshal(c.exec.toward.caps)
	return b
}

// Sample asks the client's model for a message (sampling/createMessage)
// and returns what the client answered. It ends when ctx or the call
// ends; the gateway then tells the client the request is cancelled.
func (c *Call) Sample(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	var r mcp.CreateMessageResult
	return &r, c.ask(ctx, "sampling/createMessage", p, &r)
}

// Elicit asks the client's user for input (elicitation/create). A form
// request (Mode "form" or empty) carries a RequestedSchema; a URL request
// (Mode "url") carries URL and ElicitationID, and needs the client's
// elicitation.url capability.
func (c *Call) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	if p.Mode == "" {
		q := *p
		q.Mode = "form"
		p = &q
	}
	var r mcp.ElicitResult
	return &r, c.ask(ctx, "elicitation/create", p, &r)
}

// Roots lists the client's roots (roots/list).
func (c *Call) Roots(ctx context.Context) (*mcp.ListRootsResult, error) {
	var r mcp.ListRootsResult
	return &r, c.ask(ctx, "roots/list", struct{}{}, &r)
}

func (c *Call) ask(ctx context.Context, method string, params, result any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("worker: %s params do not encode: %w", method, err)
	}
	raw, err := c.Request(ctx, method, b)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, result); err != nil {
		return fmt.Errorf("worker: the client's answer to %s does not decode: %w", method, err)
	}
	return nil
}

// Request sends the client a request of any kind the protocol allows
// toward a client, with params a JSON object, and returns its result.
// The client's JSON-RPC error is a *ClientError. It is what the upstream
// adapter relays its server's requests with.
func (c *Call) Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if c.exec == nil {
		return nil, ErrCallEnded
	}
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{}`) // params are an object, when present
	}
	if err := c.exec.toward.declared(method, params); err != nil {
		return nil, err
	}
	return c.exec.request(ctx, method, params)
}

// declared checks the client declared what method needs.
func (t *towardState) declared(method string, params json.RawMessage) error {
	need := Capability(method, params)
	if need == "" {
		return nil
	}
	top, sub, _ := cut(need)
	raw, ok := t.caps[top]
	if !ok {
		return fmt.Errorf("%w: %s needs %s", ErrNotDeclared, method, need)
	}
	if sub == "" {
		return nil
	}
	var subs map[string]json.RawMessage
	json.Unmarshal(raw, &subs)
	_, ok = subs[sub]
	// A bare "elicitation": {} declares form mode, for clients from before
	// the modes existed.
	if !ok && !(need == "elicitation.form" && len(subs) == 0) {
		return fmt.Errorf("%w: %s needs %s", ErrNotDeclared, method, need)
	}
	return nil
}

// Capability names the client capability a request toward the client
// needs ("sampling", "elicitation.form", "elicitation.url", "roots"), or
// "" when it needs none (ping). Unknown methods need the impossible
// capability of their own name.
func Capability(method string, params json.RawMessage) string {
	switch method {
	case "ping":
		return ""
	case "sampling/createMessage":
		return "sampling"
	case "roots/list":
		return "roots"
	case "elicitation/create":
		var p struct {
			Mode string `json:"mode"`
		}
		json.Unmarshal(params, &p)
		if p.Mode == "url" {
			return "elicitation.url"
		}
		return "elicitation.form"
	}
	return method
}

func cut(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '.' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// request sends one request up the stream and waits for its answer, for
// ctx, or for the call's end, whichever comes first.
func (e *execution) request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	t := &e.toward
	ch := make(chan answer, 1)
	t.mu.Lock()
	t.next++
	seq := t.next
	if t.pending == nil {
		t.pending = map[int64]chan answer{}
	}
	t.pending[seq] = ch
	t.mu.Unlock()
	if !e.sendRunning(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_ClientRequest{ClientRequest: &pb.ClientRequest{
		Seq: seq, Method: method, ParamsJson: params,
	}}}) {
		t.take(seq)
		return nil, ErrCallEnded
	}
	callDone := t.ctx.Done()
	select {
	case a := <-ch:
		return a.result, a.err
	case <-ctx.Done():
	case <-callDone:
	}
	if !t.take(seq) {
		a := <-ch // the answer won the race: it is ours
		return a.result, a.err
	}
	reason := "the tool withdrew its request"
	if t.ctx.Err() != nil {
		reason = "the call ended"
	}
	e.sendRunning(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_ClientRequestEnd{ClientRequestEnd: &pb.ClientRequestEnd{
		Seq: seq, Outcome: pb.ClientRequestOutcome_CLIENT_REQUEST_OUTCOME_WITHDRAWN, Reason: reason,
	}}})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, ErrCallEnded
}

// take removes a pending request; it reports whether it was still
// pending. Whoever takes it decides how it ended.
func (t *towardState) take(seq int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.pending[seq]
	delete(t.pending, seq)
	return ok
}

// sendRunning sends an event while the call runs; it reports whether it
// was sent.
func (e *execution) sendRunning(m *pb.ExecuteResponse) bool {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	e.mu.Lock()
	ok := e.state == running
	e.mu.Unlock()
	return ok && e.stream.Send(m) == nil
}

// Answer implements WorkerService.Answer: the client's answer to a
// request toward it, from any gateway replica.
func (w *Worker) Answer(_ context.Context, req *pb.AnswerRequest) (*pb.AnswerResponse, error) {
	w.mu.Lock()
	e := w.calls[req.GetCallId()]
	w.mu.Unlock()
	if e == nil || e.toward.scope != req.GetScope() {
		return &pb.AnswerResponse{}, nil // not running here, or not the caller's: nothing to tell
	}
	var a answer
	switch v := req.GetAnswer().(type) {
	case *pb.AnswerRequest_ResultJson:
		a.result = v.ResultJson
	case *pb.AnswerRequest_Error:
		a.err = &ClientError{Code: v.Error.GetCode(), Message: v.Error.GetMessage(), Data: v.Error.GetDataJson()}
	default:
		return nil, status.Error(codes.InvalidArgument, "an answer needs a result or an error")
	}
	t := &e.toward
	t.mu.Lock()
	ch, ok := t.pending[req.GetSeq()]
	delete(t.pending, req.GetSeq())
	t.mu.Unlock()
	if !ok {
		return &pb.AnswerResponse{}, nil // answered or withdrawn already: a late answer
	}
	// The gateway learns the request ended before anything the handler
	// does with the answer, its result included.
	e.sendRunning(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_ClientRequestEnd{ClientRequestEnd: &pb.ClientRequestEnd{
		Seq: req.GetSeq(), Outcome: pb.ClientRequestOutcome_CLIENT_REQUEST_OUTCOME_ANSWERED,
	}}})
	ch <- a
	return &pb.AnswerResponse{Accepted: true}, nil
}
