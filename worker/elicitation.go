package worker

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// CodeURLElicitationRequired (-32042) is 2025-11-25's URLElicitationRequiredError:
// the request cannot go on until the user completes URL elicitations.
const CodeURLElicitationRequired = mcpspec.CodeURLElicitationRequired

// URLElicitationRequired is the error a handler returns when its request
// cannot go on until the user completes the given URL mode elicitations
// (each with URL and ElicitationID): the client gets a -32042 error
// listing them, and may retry once they are done (see
// Worker.CompleteElicitation). A client that did not declare URL
// elicitation cannot be asked: the call fails with ErrNotDeclared.
func URLElicitationRequired(message string, elicitations ...*mcp.ElicitParams) error {
	es := make([]*mcp.ElicitParams, len(elicitations))
	for i, e := range elicitations {
		q := *e
		q.Mode = "url"
		es[i] = &q
	}
	data, _ := json.Marshal(map[string]any{"elicitations": es})
	return &jsonrpc.Error{Code: CodeURLElicitationRequired, Message: message, Data: data}
}

// CompleteElicitation tells the client that started URL elicitation id
// (with Call.Elicit, or in a URLElicitationRequired error) that its
// out-of-band interaction is done: notifications/elicitation/complete,
// sent to that client session alone. It reports false, sending nothing,
// for an id this worker did not see asked of a 2025 session in the last
// hour, or one already completed. Delivery is best effort, as for
// NotifySession.
func (w *Worker) CompleteElicitation(id string) bool {
	session, ok := w.elicited.take(id)
	if ok {
		w.NotifySession(session, "notifications/elicitation/complete", map[string]string{"elicitationId": id})
	}
	return ok
}

// Bounds of the URL elicitations remembered for CompleteElicitation.
const (
	elicitationTTL  = time.Hour
	maxElicitations = 4096
)

// elicitations maps the ids of URL elicitations asked of 2025 sessions to
// the session, so that only it hears of their completion.
type elicitations struct {
	mu sync.Mutex
	m  map[string]elicited
}

type elicited struct {
	session string
	at      time.Time
}

// note remembers that session was asked URL elicitation id. Past the
// bound, entries past their TTL go first, then the oldest.
func (es *elicitations) note(session, id string) {
	if session == "" || id == "" {
		return // a 2026-07-28 request has no session to tell later
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.m == nil {
		es.m = map[string]elicited{}
	}
	now := time.Now()
	if len(es.m) >= maxElicitations {
		oldest, at := "", now
		for k, e := range es.m {
			if now.Sub(e.at) > elicitationTTL {
				delete(es.m, k)
			} else if e.at.Before(at) {
				oldest, at = k, e.at
			}
		}
		if len(es.m) >= maxElicitations {
			delete(es.m, oldest)
		}
	}
	es.m[id] = elicited{session: session, at: now}
}

// take forgets id and returns its session, if it was noted within the TTL.
func (es *elicitations) take(id string) (string, bool) {
	es.mu.Lock()
	defer es.mu.Unlock()
	e, ok := es.m[id]
	delete(es.m, id)
	if !ok || time.Since(e.at) > elicitationTTL {
		return "", false
	}
	return e.session, true
}

// noteURLElicitation remembers the session of a URL elicitation about
// to be sent (a is pending, so the client declared it), for
// CompleteElicitation.
func (c *Call) noteURLElicitation(a *asked, method string, params json.RawMessage) {
	if a.ch == nil || method != "elicitation/create" {
		return
	}
	var p struct {
		Mode          string `json:"mode"`
		ElicitationID string `json:"elicitationId"`
	}
	if json.Unmarshal(params, &p) == nil && p.Mode == "url" {
		c.exec.w.elicited.note(c.session, p.ElicitationID)
	}
}

// urlElicitationError checks a handler's -32042 error: the client must
// have declared URL elicitation, and every elicitation listed is noted
// for CompleteElicitation. ok is false for any other error.
func (c *Call) urlElicitationError(err error) (rpcErr *jsonrpc.Error, ok bool, _ error) {
	if c.exec == nil || !errors.As(err, &rpcErr) || rpcErr.Code != CodeURLElicitationRequired {
		return nil, false, nil
	}
	if derr := c.exec.children.declared("elicitation/create", json.RawMessage(`{"mode":"url"}`)); derr != nil {
		return nil, true, derr
	}
	var data struct {
		Elicitations []struct {
			ElicitationID string `json:"elicitationId"`
		} `json:"elicitations"`
	}
	json.Unmarshal(rpcErr.Data, &data)
	for _, e := range data.Elicitations {
		c.exec.w.elicited.note(c.session, e.ElicitationID)
	}
	return rpcErr, true, nil
}
