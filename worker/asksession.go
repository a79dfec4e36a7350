package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// Requests toward a client session outside any call: a fronted server's
// roots/list after initialize, say, on the upstream session kept for
// that client. The request goes up the control stream as a session
// notification that carries a request id; the gateway replica holding
// the session's notification stream (its 2025 GET stream, or stdio)
// issues it under that id, which names this worker, so that whichever
// replica receives the client's answer brings it here with Answer. As for
// a call's requests, the worker alone decides, once, between the answer
// and the asker giving up; giving up cancels the request at the client.

// Errors of session requests.
var (
	// ErrNoSession says the request names no client session (a
	// 2026-07-28 request belongs to none) or a method a client session
	// cannot be asked outside a call.
	ErrNoSession = errors.New("worker: only a 2025 HTTP session or a stdio connection can be asked outside a call")
	// ErrTooManyAsks says too many session requests are pending.
	ErrTooManyAsks = errors.New("worker: too many requests toward client sessions are pending")
)

// maxSessionAsks bounds the session requests pending at once.
const maxSessionAsks = 1024

// sessionAsks are the session requests awaiting their answers, by token.
type sessionAsks struct {
	mu sync.Mutex
	m  map[string]sessionAsk
}

type sessionAsk struct {
	session string
	ch      chan clientAnswer // buffered: Answer never waits
}

// AskSession sends a request toward client session session, outside any
// call, and returns the client's answer: its result as JSON, or a
// *ClientError. method is roots/list, sampling/createMessage or
// elicitation/create. A client that did not declare the capability is
// answered for by its gateway with a ClientError (-32601). It ends with
// ctx, cancelling the request at the client; since nothing answers when
// no gateway holds a notification stream for the session (a 2025 client
// that opened no GET stream), bound ctx.
func (w *Worker) AskSession(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	if !client.IsSessionScope(session) || !askable(method) {
		return nil, ErrNoSession
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	if string(b) == "null" {
		b = []byte("{}") // roots/list's params are optional; null is not allowed
	}
	token := randid.New(16)
	ch := make(chan clientAnswer, 1)
	w.asks.mu.Lock()
	if len(w.asks.m) >= maxSessionAsks {
		w.asks.mu.Unlock()
		return nil, ErrTooManyAsks
	}
	if w.asks.m == nil {
		w.asks.m = map[string]sessionAsk{}
	}
	w.asks.m[token] = sessionAsk{session: session, ch: ch}
	w.asks.mu.Unlock()
	id := client.SessionRequestID(w.opts.Name, token)
	w.ctrl.notify(&pb.SessionNotification{Session: session, Method: method, ParamsJson: b, RequestId: id})
	select {
	case a := <-ch:
		return a.result, a.err
	case <-ctx.Done():
	}
	if _, ok := w.asks.take(token, session); !ok {
		a := <-ch // the answer won: Answer took it first and sent it
		return a.result, a.err
	}
	w.NotifySession(session, "notifications/cancelled", map[string]string{"requestId": id, "reason": "the server gave up its request"})
	return nil, ctx.Err()
}

// take removes the pending request token of session and returns it, if
// it was pending: it is then the caller's to settle.
func (as *sessionAsks) take(token, session string) (sessionAsk, bool) {
	as.mu.Lock()
	defer as.mu.Unlock()
	a, ok := as.m[token]
	if !ok || a.session != session {
		return sessionAsk{}, false
	}
	delete(as.m, token)
	return a, true
}

// answerSession delivers a client's answer to a session request, if it
// is still pending and came from the session that was asked.
func (w *Worker) answerSession(req *pb.AnswerRequest) *pb.AnswerResponse {
	a, ok := w.asks.take(req.GetSessionRequest(), req.GetScope())
	if !ok {
		return &pb.AnswerResponse{} // answered, given up, or not this session's
	}
	a.ch <- answerOf(req)
	return &pb.AnswerResponse{Accepted: true}
}

func answerOf(req *pb.AnswerRequest) clientAnswer {
	if e := req.GetError(); e != nil {
		return clientAnswer{err: &ClientError{Code: e.GetCode(), Message: e.GetMessage(), Data: e.GetDataJson()}}
	}
	return clientAnswer{result: req.GetResultJson()}
}

func askable(method string) bool {
	switch method {
	case "roots/list", "sampling/createMessage", "elicitation/create":
		return true
	}
	return false
}
