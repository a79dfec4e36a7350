package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
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

// childRequests is a call's requests toward its client.
type childRequests struct {
	ctx   context.Context // the handler's: a request ends with its call
	caps  json.RawMessage // the client's capabilities object, nil for none
	scope string

	mu      sync.Mutex
	next    int64
	pending map[int64]chan clientAnswer
	inputs  map[string]json.RawMessage // 2026-07-28 answers of earlier rounds, by key
	batch   []taskAsk                  // a task's requests gathered to record at once (task_input.go)
	methods map[int64]string           // every request's method, by number
	ended   []*pb.ChildRequest         // how each ended request ended, for the audit
}

// endLocked notes how a request ended. Callers hold t.mu.
func (t *childRequests) endLocked(seq int64, outcome string) {
	t.ended = append(t.ended, &pb.ChildRequest{Seq: seq, Method: t.methods[seq], Outcome: outcome})
}

// children are the call's requests toward its client for its audit
// record: those still pending count as cancelled with the call.
func (t *childRequests) records() []*pb.ChildRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]*pb.ChildRequest(nil), t.ended...)
	for seq := range t.pending {
		out = append(out, &pb.ChildRequest{Seq: seq, Method: t.methods[seq], Outcome: "cancelled"})
	}
	return out
}

type clientAnswer struct {
	result json.RawMessage
	err    error
}

func (t *childRequests) init(ctx context.Context, req *pb.ExecuteRequest) {
	t.ctx, t.scope = ctx, req.GetScope()
	if b := req.GetClientCapabilitiesJson(); len(b) > 0 && b[0] == '{' && json.Valid(b) {
		t.caps = b
	}
	for k, v := range req.GetInputResponses() {
		if t.inputs == nil {
			t.inputs = map[string]json.RawMessage{}
		}
		t.inputs[k] = v
	}
}

// ClientCapabilities returns the capabilities the client declared (a
// ClientCapabilities object), or nil if it declared none.
func (c *Call) ClientCapabilities() json.RawMessage {
	if c.exec == nil {
		return nil
	}
	return slices.Clone(c.exec.children.caps)
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
	a := c.exec.prepare(ctx, method, params)
	c.noteURLElicitation(a, method, params)
	c.exec.sendAsked(ctx, a, method, params, false)
	return c.exec.wait(ctx, a)
}

// Input is one request of AskAll.
type Input struct {
	// Key names the request for 2026-07-28 clients (see WithInputKey);
	// empty means its number in the call.
	Key    string
	Method string
	// Params is the request's params, a JSON object.
	Params json.RawMessage
}

// AskAll sends the client several requests at once and waits for every
// answer; answers[i] or errs[i] is request i's. A 2026-07-28 client gets
// them in one input_required result.
func (c *Call) AskAll(ctx context.Context, inputs ...Input) (answers []json.RawMessage, errs []error) {
	answers, errs = make([]json.RawMessage, len(inputs)), make([]error, len(inputs))
	if c.exec == nil {
		for i := range errs {
			errs[i] = ErrCallEnded
		}
		return answers, errs
	}
	as := make([]*asked, len(inputs))
	ctxs := make([]context.Context, len(inputs))
	last := -1
	for i, in := range inputs {
		if len(in.Params) == 0 || string(in.Params) == "null" {
			inputs[i].Params = json.RawMessage(`{}`)
		}
		ctxs[i] = ctx
		if in.Key != "" {
			ctxs[i] = WithInputKey(ctx, in.Key)
		}
		as[i] = c.exec.prepare(ctxs[i], in.Method, inputs[i].Params)
		if as[i].ch != nil {
			last = i
		}
	}
	for i, in := range inputs {
		c.noteURLElicitation(as[i], in.Method, inputs[i].Params)
		c.exec.sendAsked(ctxs[i], as[i], in.Method, inputs[i].Params, i < last)
	}
	for i := range inputs {
		answers[i], errs[i] = c.exec.wait(ctx, as[i])
	}
	return answers, errs
}

type inputKeyCtx struct{}

// WithInputKey names the requests toward the client made with ctx: a
// 2026-07-28 client sees key in the inputRequests of an input_required
// result and answers under it when it retries the call. Without a key a
// request is named by its number in the call, which is the same in every
// round as long as the handler asks in the same order.
func WithInputKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, inputKeyCtx{}, key)
}

func inputKey(ctx context.Context, seq int64) string {
	if k, ok := ctx.Value(inputKeyCtx{}).(string); ok && k != "" {
		return k
	}
	return fmt.Sprintf("input-%d", seq)
}

// declared checks the client declared what method needs.
func (t *childRequests) declared(method string, params json.RawMessage) error {
	if need, ok := mcpspec.Declared(t.caps, method, params); !ok {
		return fmt.Errorf("%w: %s needs %s", ErrNotDeclared, method, need)
	}
	return nil
}

// asked is one request toward the client: answered from the call's
// input responses, refused, or sent and awaiting its answer.
type asked struct {
	seq    int64
	key    string
	ch     chan clientAnswer // nil when answered already
	answer clientAnswer
}

// prepare numbers a request and, unless the call's input responses
// answer it (2026-07-28 retries), registers it as pending.
func (e *execution) prepare(ctx context.Context, method string, params json.RawMessage) *asked {
	t := &e.children
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	a := &asked{seq: t.next}
	if t.methods == nil {
		t.methods = map[int64]string{}
	}
	t.methods[a.seq] = method
	key := inputKey(ctx, a.seq)
	a.key = key
	if r, ok := t.inputs[key]; ok {
		delete(t.inputs, key) // one answer per request
		a.answer = clientAnswer{result: r}
		t.endLocked(a.seq, "from_input")
		return a
	}
	if err := t.declared(method, params); err != nil {
		a.answer = clientAnswer{err: err}
		t.endLocked(a.seq, "refused")
		return a
	}
	a.ch = make(chan clientAnswer, 1)
	if t.pending == nil {
		t.pending = map[int64]chan clientAnswer{}
	}
	t.pending[a.seq] = a.ch
	return a
}

// sendAsked sends a prepared request up the stream; more says others follow
// at once.
func (e *execution) sendAsked(ctx context.Context, a *asked, method string, params json.RawMessage, more bool) {
	if a.ch == nil {
		return
	}
	if e.task {
		e.askInTask(a, method, params, more) // task_input.go
		return
	}
	if !e.sendRunning(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_ClientRequest{ClientRequest: &pb.ClientRequest{
		Seq: a.seq, Method: method, ParamsJson: params, Key: inputKey(ctx, a.seq), More: more, Parkable: e.parkable(),
	}}}) && e.children.take(a.seq, "cancelled") {
		a.ch, a.answer = nil, clientAnswer{err: ErrCallEnded}
	}
}

// wait waits for a sent request's answer, for ctx, or for the call's
// end, whichever comes first.
func (e *execution) wait(ctx context.Context, a *asked) (json.RawMessage, error) {
	if a.ch == nil {
		return a.answer.result, a.answer.err
	}
	t := &e.children
	select {
	case r := <-a.ch:
		return r.result, r.err
	case <-ctx.Done():
	case <-t.ctx.Done():
	}
	reason, outcome := "the tool withdrew its request", "withdrawn"
	if t.ctx.Err() != nil {
		reason, outcome = "the call ended", "cancelled"
	}
	if !t.take(a.seq, outcome) {
		r := <-a.ch // the answer won the race: it is ours
		return r.result, r.err
	}
	if e.task {
		e.withdrawInTask(a.key)
	}
	e.sendRunning(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_ClientRequestEnd{ClientRequestEnd: &pb.ClientRequestEnd{
		Seq: a.seq, Outcome: pb.ClientRequestOutcome_CLIENT_REQUEST_OUTCOME_WITHDRAWN, Reason: reason,
	}}})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, ErrCallEnded
}

// take removes a pending request; it reports whether it was still
// pending. Whoever takes it decides how it ended.
func (t *childRequests) take(seq int64, outcome string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.pending[seq]
	delete(t.pending, seq)
	if ok {
		t.endLocked(seq, outcome)
	}
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
func (w service) Answer(_ context.Context, req *pb.AnswerRequest) (*pb.AnswerResponse, error) {
	if req.GetAnswer() == nil {
		return nil, status.Error(codes.InvalidArgument, "an answer needs a result or an error")
	}
	if req.GetSessionRequest() != "" {
		return w.answerSession(req), nil // asksession.go
	}
	w.mu.Lock()
	e := w.calls[req.GetCallId()]
	w.mu.Unlock()
	if e == nil || e.children.scope != req.GetScope() {
		return &pb.AnswerResponse{}, nil // not running here, or not the caller's: nothing to tell
	}
	a := answerOf(req) // asksession.go
	outcome := "answered"
	if a.err != nil {
		outcome = "error"
	}
	t := &e.children
	t.mu.Lock()
	ch, ok := t.pending[req.GetSeq()]
	delete(t.pending, req.GetSeq())
	if ok {
		t.endLocked(req.GetSeq(), outcome)
	}
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
