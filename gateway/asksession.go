package gateway

import (
	"context"
	"encoding/json"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// Requests toward a client session outside any call (docs/design.md §10): a
// fronted server's roots/list after initialize, say. A worker's request
// arrives as a session notification carrying a request id
// (Worker.AskSession); the replica holding the session's notification
// stream (the 2025 GET stream, or stdout) issues it under that id, which
// names the worker, after checking the client declared the capability.
// The client's answer, POSTed to any replica, goes to that worker with
// WorkerService.Answer. A request the worker gives up arrives as its own
// notifications/cancelled, delivered like any session notification.

// askSession issues a worker's session request to this session's client,
// or refuses it for the client when the client did not declare the
// capability. It never waits on the network: the request is queued on
// the notification sink, and a refusal travels on its own goroutine.
func (s *session) askSession(method, id string, params json.RawMessage) {
	if s.speaks2026() {
		return // a 2026-07-28 client has no session to ask
	}
	s.mu.Lock()
	caps := s.clientCaps
	s.mu.Unlock()
	if _, ok := mcpspec.Declared(caps, method, params); !ok {
		s.refuseSession(id, jsonrpc.CodeMethodNotFound, "the client did not declare the capability "+method+" needs")
		return
	}
	var p any = params
	if len(params) == 0 || string(params) == "null" {
		p = nil // no params, rather than a null the client must refuse
	}
	if !s.notify(jsonrpc.Request(jsonrpc.String(id), method, p)) {
		s.refuseSession(id, jsonrpc.CodeInternalError, "the client's stream could not take the request")
	}
}

// refuseSession answers a session request with an error for the client,
// on a goroutine the gateway's Close waits for. A closed gateway refuses
// nothing: the worker's request ends with its own deadline.
func (s *session) refuseSession(id string, code int, msg string) {
	s.g.spawn(&s.g.refusals, func() {
		s.answerSession(id, &jsonrpc.Message{Error: &jsonrpc.Error{Code: code, Message: msg}})
	})
}

// answerSession takes a client's answer to a session request to the
// worker its id names; it reports whether the worker took it. Each
// answer costs a lookup token, as a cancel naming no local call does, so
// a flood of made-up answers costs the coordinators little.
func (s *session) answerSession(id string, m *jsonrpc.Message) bool {
	worker, token, ok := client.ParseSessionRequestID(id)
	if !ok {
		return false
	}
	if s.lookups.take(false) != tokenTaken {
		return false
	}
	accepted := false
	defer func() { s.lookups.done(accepted) }() // one that found its request was worth its lookup
	wc := s.workerNamed(worker)
	if wc == nil {
		return false
	}
	req := answerRequest(m)
	req.Scope, req.SessionRequest = s.scope, token
	ctx, cancel := context.WithTimeout(s.g.base, cancelTimeout)
	defer cancel()
	resp, err := wc.Answer(ctx, req)
	if err != nil {
		s.g.log.Warn("could not deliver a client's answer to its worker", "scope", s.scope, "worker", worker, "err", err)
		return false
	}
	accepted = resp.GetAccepted()
	return accepted
}

// workerNamed is a client for the worker of that name, if it is attached.
func (s *session) workerNamed(name string) pb.WorkerServiceClient {
	ctx, cancel := context.WithTimeout(s.g.base, cancelTimeout)
	defer cancel()
	ws, err := s.g.coord.ListWorkers(ctx, &pb.ListWorkersRequest{})
	if err != nil {
		return nil
	}
	for _, w := range ws.GetWorkers() {
		if w.GetName() == name {
			wc, err := s.g.workerClient(w.GetAddress())
			if err != nil {
				return nil
			}
			return wc
		}
	}
	return nil
}
