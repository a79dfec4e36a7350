package clientcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// After a cancellation, call waits at most cancelDeliveryWait for the
// cancellation to reach the server, then at most auditWait for the call's
// audit record, asking every auditPoll.
const (
	cancelDeliveryWait = 2 * time.Second
	auditWait          = 2 * time.Second
	auditPoll          = 20 * time.Millisecond
)

// callTrace watches one call's MCP traffic for what the audit lookup needs:
// the JSON-RPC id of the tools/call request, the scope the gateway ran it
// in (its Mcpcancel-Scope response header), and whether the cancellation
// went out.
type callTrace struct {
	cancelDone chan struct{} // closed once a notifications/cancelled was written
	cancelOnce sync.Once

	mu          sync.Mutex
	sent        bool            // the tools/call request went out
	id          json.RawMessage // its id
	callSession string          // the session it went in, if any
	callScope   string          // the scope its response named
	// A session and the scope its responses named: the call's scope when
	// the call's own response never came (it was cancelled before the
	// gateway sent anything, which opens the response).
	session, sessionScope string
}

func newCallTrace() *callTrace { return &callTrace{cancelDone: make(chan struct{})} }

func (t *callTrace) sawCallSent(id json.RawMessage, session string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent, t.id, t.callSession = true, id, session
}

// sawResponse notes the scope a response to a method named.
func (t *callTrace) sawResponse(method, session, scope string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if method == "tools/call" {
		t.callScope = scope
	}
	if session != "" && scope != "" {
		t.session, t.sessionScope = session, scope
	}
}

func (t *callTrace) sawCancel() { t.cancelOnce.Do(func() { close(t.cancelDone) }) }

// key is the call's key in the coordinator, if the gateway named the scope.
func (t *callTrace) key() (*pb.CallKey, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	scope := t.callScope
	if scope == "" && t.callSession != "" && t.callSession == t.session {
		scope = t.sessionScope
	}
	id, err := client.ParseRequestID(t.id)
	if scope == "" || err != nil {
		return nil, false
	}
	return &pb.CallKey{Scope: scope, RequestId: id}, true
}

// waitCancelDelivered waits, a while at most, until the cancellation of a
// call that went out has gone out too, so that closing the session cannot
// overtake it.
func (t *callTrace) waitCancelDelivered() {
	t.mu.Lock()
	sent := t.sent
	t.mu.Unlock()
	if !sent {
		return
	}
	timer := time.NewTimer(cancelDeliveryWait)
	defer timer.Stop()
	select {
	case <-t.cancelDone:
	case <-timer.C:
	}
}

// traceRoundTripper feeds a callTrace from the HTTP requests of a session.
type traceRoundTripper struct {
	rt    http.RoundTripper
	trace *callTrace
}

func (r *traceRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	msg, req, err := peekMessage(req)
	if err != nil {
		return nil, err
	}
	session := req.Header.Get(mcpspec.HeaderSessionID)
	if msg.Method == "tools/call" {
		r.trace.sawCallSent(msg.ID, session)
	}
	resp, err := r.rt.RoundTrip(req)
	if err == nil {
		if s := resp.Header.Get(mcpspec.HeaderSessionID); s != "" {
			session = s // the answer to initialize
		}
		r.trace.sawResponse(msg.Method, session, resp.Header.Get(client.HeaderScope))
	}
	if msg.Method == "notifications/cancelled" {
		r.trace.sawCancel()
	}
	return resp, err
}

// wireMessage is what the trace reads of a JSON-RPC message.
type wireMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// peekMessage reads the JSON-RPC message a POST carries and returns a
// copy of req whose body reads the same.
func peekMessage(req *http.Request) (wireMessage, *http.Request, error) {
	var msg wireMessage
	if req.Method != http.MethodPost || req.Body == nil {
		return msg, req, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return msg, nil, err
	}
	json.Unmarshal(b, &msg) // not one message: nothing to trace
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return msg, req, nil
}

// tracedTransport feeds a callTrace from what a stdio session writes.
type tracedTransport struct {
	mcp.Transport
	trace *callTrace
}

func (t *tracedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tracedConn{Connection: c, trace: t.trace}, nil
}

type tracedConn struct {
	mcp.Connection
	trace *callTrace
}

func (c *tracedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	req, _ := msg.(*jsonrpc.Request)
	if req != nil && req.Method == "tools/call" {
		c.trace.sawCallSent(nil, "")
	}
	err := c.Connection.Write(ctx, msg)
	if req != nil && req.Method == "notifications/cancelled" {
		c.trace.sawCancel()
	}
	return err
}

// cancelled reports a cancelled call: "cancelled", then what the audit
// says about it.
func (o *callFlags) cancelled(ctx context.Context, s cmdline.Streams, trace *callTrace) (int, error) {
	fmt.Fprintln(s.Stdout, "cancelled")
	trace.waitCancelDelivered()
	if !o.audit {
		return exitCancelled, nil
	}
	if o.stdio() {
		fmt.Fprintln(s.Stderr, "mcpcancel call: no audit lookup over stdio (the gateway names the call's scope over HTTP only)")
		return exitCancelled, nil
	}
	key, ok := trace.key()
	if !ok {
		fmt.Fprintf(s.Stderr, "mcpcancel call: no audit lookup: the server did not name the call's scope (%s) before it was cancelled\n", client.HeaderScope)
		return exitCancelled, nil
	}
	recs, err := o.readAudit(context.WithoutCancel(ctx), key)
	if err != nil {
		return cmdline.ExitFailed, fmt.Errorf("cannot read the audit: %w", coordinatorErr(o.coordinator, err))
	}
	if err := o.printAudit(s, recs); err != nil {
		return cmdline.ExitFailed, err
	}
	return exitCancelled, nil
}

// readAudit finds the call by its key and returns its audit records, once
// its decision is recorded with the time its handler stopped, or what
// there is after auditWait. No records and no error: the coordinator
// never heard of the call.
func (o *callFlags) readAudit(ctx context.Context, key *pb.CallKey) ([]*client.AuditRecord, error) {
	conn, err := dialCoordinator(o.coordinator, o.tls)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	r := &auditReader{c: pb.NewCoordinatorServiceClient(conn), key: key}
	ctx, cancel := context.WithTimeout(ctx, auditWait)
	defer cancel()
	tick := time.NewTicker(auditPoll)
	defer tick.Stop()
	var last []*client.AuditRecord
	for {
		recs, err := r.read(ctx)
		switch {
		case ctx.Err() != nil:
			return last, nil
		case err != nil:
			return nil, err
		case stopped(recs):
			return recs, nil
		}
		last = recs
		select {
		case <-tick.C:
		case <-ctx.Done():
			return last, nil
		}
	}
}

// auditReader reads one call's audit records.
type auditReader struct {
	c      pb.CoordinatorServiceClient
	key    *pb.CallKey
	callID string // once found
}

// read returns the call's records so far: none while the coordinator has
// not heard of the call.
func (r *auditReader) read(ctx context.Context) ([]*client.AuditRecord, error) {
	if r.callID == "" {
		resp, err := r.c.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{Key: r.key}})
		if client.Is(err, client.ErrUnknownCall) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		r.callID = resp.GetCall().GetCallId()
	}
	return listCallAudit(ctx, r.c, r.callID)
}

func listCallAudit(ctx context.Context, c pb.CoordinatorServiceClient, callID string) ([]*client.AuditRecord, error) {
	resp, err := c.ListAudit(ctx, &pb.ListAuditRequest{CallId: callID})
	if err != nil {
		return nil, err
	}
	var recs []*client.AuditRecord
	for _, r := range resp.GetRecords() {
		recs = append(recs, client.AuditFromProto(r))
	}
	return recs, nil
}

// stopped says whether recs hold the call's decision, with the time its
// handler stopped.
func stopped(recs []*client.AuditRecord) bool {
	for _, r := range recs {
		if r.Outcome != "cancel_lost" && r.StoppedAt != nil {
			return true
		}
	}
	return false
}

func (o *callFlags) printAudit(s cmdline.Streams, recs []*client.AuditRecord) error {
	if len(recs) == 0 {
		fmt.Fprintln(s.Stderr, "mcpcancel call: the audit has no record of the call (it was cancelled before the coordinator heard of it)")
		return nil
	}
	for _, r := range recs {
		if !o.json {
			fmt.Fprintln(s.Stdout, auditLine(r))
			continue
		}
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("audit record of call %s: %w", r.CallID, err)
		}
		fmt.Fprintf(s.Stdout, "%s\n", b)
	}
	return nil
}

// auditLine is an audit record for people: `audit: cancelled by client
// (reason "context canceled") settled 2026-...; handler stopped 12ms later
// on worker dev-worker; call 3f9c2a1b`.
func auditLine(r *client.AuditRecord) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "audit: %s", r.Outcome)
	if r.Initiator != "" {
		fmt.Fprintf(&b, " by %s", r.Initiator)
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, " (reason %q)", r.Reason)
	}
	fmt.Fprintf(&b, " settled %s", r.SettledAt.Format(time.RFC3339Nano))
	if r.Outcome != "cancel_lost" { // a late cancellation stops no handler
		fmt.Fprintf(&b, "; %s", handlerStop(r))
	}
	if r.Worker != "" {
		fmt.Fprintf(&b, " on worker %s", r.Worker)
	}
	// The short id audit list prints and its --call takes.
	fmt.Fprintf(&b, "; call %s", r.CallID[:min(len(r.CallID), shortCallID)])
	return b.String()
}

// handlerStop says when the handler returned, relative to the decision.
func handlerStop(r *client.AuditRecord) string {
	switch {
	case r.StoppedAt == nil:
		return "handler not yet known to have stopped"
	case r.StoppedAt.Before(r.SettledAt):
		return fmt.Sprintf("handler returned %s before", roundDelay(r.SettledAt.Sub(*r.StoppedAt)))
	default:
		return fmt.Sprintf("handler stopped %s later", roundDelay(r.StoppedAt.Sub(r.SettledAt)))
	}
}

func roundDelay(d time.Duration) time.Duration {
	if d >= time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
