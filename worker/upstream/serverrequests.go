package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// Requests the server sends toward its client. The adapter declares
// sampling, elicitation (form and URL) and roots to its server, so the
// server registers the tools that need them, and relays each such request
// to the client of the call it relates to, through Call.Request: the
// gateway issues it under an id of its own and the SDK keeps the server's,
// so ids are translated both ways. When the server cancels its request
// (notifications/cancelled), the SDK ends the request's context, the call
// withdraws its request and the gateway cancels it at the client.
//
// roots/list serves no call: a client's roots are its session's, and
// servers ask for them after initialize and on roots/list_changed, then
// keep them. Tying it to a call would make a 2026-07-28 client answer it
// by multi round-trip and run the call's tool again. So it is always the
// session's: on an upstream session kept for one client session
// (per-client mode) it is asked of that client outside any call
// (Worker.AskSession), on its GET stream or stdout; on the shared
// session, which no client owns, the adapter answers as the SDK does,
// with the roots it declares (none).
//
// Sampling and elicitation serve the call that asks them, but stdio
// carries no relation between a server's request and its call. Such a
// request is therefore related to the call in flight on its upstream
// session when exactly one is. Otherwise, on an upstream session kept for
// one client session, it is asked of the client session itself; on the
// shared session it has no defined client and the server is answered
// with an error.

// sessionAskTimeout bounds a request asked of a client session outside
// any call: nothing answers one whose client opened no GET stream.
const sessionAskTimeout = 30 * time.Second

// errNoCall is what the server hears for a request no call can answer.
const (
	codeNoCall   = -32603
	codeNotAsked = -32601
)

// adapterCapabilities are what the adapter declares to its server.
func adapterCapabilities() *mcp.ClientCapabilities {
	return &mcp.ClientCapabilities{
		Sampling:    &mcp.SamplingCapabilities{},
		Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}},
		RootsV2:     &mcp.RootCapabilities{},
	}
}

// inflight is the runs of calls being forwarded to the server (park.go),
// and the upstream session each runs on.
type inflight struct {
	mu    sync.Mutex
	calls map[*run]*mcp.ClientSession
}

// add records run r on upstream session s until the returned func is
// called.
func (f *inflight) add(r *run, s *mcp.ClientSession) func() {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[*run]*mcp.ClientSession{}
	}
	f.calls[r] = s
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.calls, r)
		f.mu.Unlock()
	}
}

// only returns the run in flight on upstream session s if there is
// exactly one, and how many there are: a request the server sends on a
// session serves one of that session's calls, so with an upstream
// session per client, each client's lone call is found whatever the
// others run. A parked run does not count: its server waits on the
// request it asked, so a new one is another call's.
func (f *inflight) only(s *mcp.ClientSession) (*run, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var one *run
	n := 0
	for r, sess := range f.calls {
		if (s == nil || sess == s) && !r.isParked() {
			one, n = r, n+1
		}
	}
	if n != 1 {
		return nil, n
	}
	return one, 1
}

// relayToClient is the receiving middleware of the upstream session kept
// for client session key ("" for the shared one): requests toward the
// client go to the call's client, or to the client session itself;
// everything else to the SDK.
func (a *Adapter) relayToClient(key string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return a.relayFor(key, next)
	}
}

func (a *Adapter) relayFor(key string, next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "sampling/createMessage":
			raw, err := a.askClient(ctx, key, method, req)
			return decodeAnswer(raw, err, &mcp.CreateMessageResult{})
		case "elicitation/create":
			raw, err := a.askClient(ctx, key, method, req)
			return decodeAnswer(raw, err, &mcp.ElicitResult{})
		case "roots/list":
			if key == "" {
				return next(ctx, method, req) // the SDK's answer: the adapter's roots
			}
			raw, err := a.askSession(ctx, key, method, req)
			return decodeAnswer(raw, err, &mcp.ListRootsResult{})
		default:
			return next(ctx, method, req)
		}
	}
}

// decodeAnswer is the client's answer as the result the server hears.
func decodeAnswer(raw json.RawMessage, err error, result mcp.Result) (mcp.Result, error) {
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, result); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client's answer does not decode: " + err.Error()}
	}
	return result, nil
}

// askSession asks the client session key a server request outside any
// call. It ends when the server cancels it (ctx) or after
// sessionAskTimeout.
func (a *Adapter) askSession(ctx context.Context, key, method string, req mcp.Request) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, sessionAskTimeout)
	defer cancel()
	raw, err := a.w.AskSession(ctx, key, method, wireParams(req))
	return raw, answerError(err)
}

// wireParams are a server request's params as they go on the wire.
func wireParams(req mcp.Request) any {
	if p, ok := req.GetParams().(*mcp.ElicitParams); ok && p.Mode == "" {
		p.Mode = "form" // the SDK's zero value; on the wire, a form request
	}
	return req.GetParams()
}

// answerError is what the server hears for a request the client did not
// answer with a result.
func answerError(err error) error {
	var ce *worker.ClientError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return &jsonrpc.Error{Code: ce.Code, Message: ce.Message, Data: ce.Data}
	case errors.Is(err, worker.ErrNotDeclared):
		return &jsonrpc.Error{Code: codeNotAsked, Message: "the client did not declare the capability this request needs"}
	default:
		return &jsonrpc.Error{Code: codeNoCall, Message: "the request was not answered: " + err.Error()}
	}
}

// askClient relays one server request to its call's client. It ends when
// the server cancels it (ctx) or the call ends.
func (a *Adapter) askClient(ctx context.Context, key, method string, req mcp.Request) (json.RawMessage, error) {
	s, _ := req.GetSession().(*mcp.ClientSession)
	r, n := a.calls.only(s)
	if r == nil && key != "" {
		// The upstream session is this client's alone: the request is the
		// client's, whichever of its calls (if any) it serves.
		return a.askSession(ctx, key, method, req)
	}
	if r == nil {
		msg := "no call is in flight to relate this request to"
		if n > 1 {
			msg = "several calls are in flight and the request does not say which it serves"
		}
		a.log.Info("refusing a server request toward the client", "method", method, "reason", msg)
		return nil, &jsonrpc.Error{Code: codeNoCall, Message: msg}
	}
	return r.ask(ctx, method, req)
}

// askCall relays a request to the client of call c, whose context is
// callCtx. It ends when the server cancels it (ctx) or the call ends.
func askCall(ctx context.Context, c *worker.Call, callCtx context.Context, method string, req mcp.Request) (json.RawMessage, error) {
	params, err := json.Marshal(wireParams(req))
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	raw, err := requestOf(ctx, c, callCtx, method, params)
	return raw, answerError(err)
}

// requestOf sends the client of call c, whose context is callCtx, one
// request; the client's error is returned as the worker gives it.
func requestOf(ctx context.Context, c *worker.Call, callCtx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(callCtx, cancel)()
	defer cancel()
	return c.Request(ctx, method, params)
}

// A server that speaks 2026-07-28 asks by multi round-trip: its result is
// input_required, with inputRequests. The SDK fulfils them through the
// client's handlers, in the context of the request they answer, and
// retries the request with the answers and the server's requestState. So
// these questions are related to their call exactly, whatever the
// transport: the adapter's handlers relay each to the call's client (a
// 2025-era client gets it on the call's stream; a 2026-07-28 client as
// the gateway's own input_required, the call parked until the client's
// retry resumes it, park.go), and the SDK retries the server. roots/list input
// requests are answered by the SDK with the adapter's roots (none): roots
// are the session's (above).

// callKey carries, in the context of a request to the server, the call it
// serves.
type callKey struct{}

type servedCall struct {
	call *worker.Call
	ctx  context.Context // the call's
}

func withCall(ctx context.Context, c *worker.Call) context.Context {
	return context.WithValue(ctx, callKey{}, servedCall{call: c, ctx: ctx})
}

// askInput relays one input request of the server's multi round-trip to
// the client of the call it serves.
func askInput(ctx context.Context, method string, req mcp.Request) (json.RawMessage, error) {
	if r := runOf(ctx); r != nil {
		return r.ask(ctx, method, req) // a tools/call: its call may be parked
	}
	sc, ok := ctx.Value(callKey{}).(servedCall)
	if !ok {
		return nil, &jsonrpc.Error{Code: codeNoCall, Message: "the input request serves no call"}
	}
	return askCall(ctx, sc.call, sc.ctx, method, req)
}

func elicitInput(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	raw, err := askInput(ctx, "elicitation/create", req)
	return answerAs[mcp.ElicitResult](raw, err)
}

func sampleInput(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
	raw, err := askInput(ctx, "sampling/createMessage", req)
	return answerAs[mcp.CreateMessageWithToolsResult](raw, err)
}

// answerAs is the client's answer as an R.
func answerAs[R any](raw json.RawMessage, err error) (*R, error) {
	r := new(R)
	if _, err := decodeAnswer(raw, err, any(r).(mcp.Result)); err != nil {
		return nil, err
	}
	return r, nil
}
