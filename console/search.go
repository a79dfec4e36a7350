package console

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Choices the search form offers.
var (
	outcomes   = []string{"completed", "tool_error", "cancelled", "failed", "cancel_lost"}
	initiators = []string{"client", "timeout", "disconnect", "shutdown", "operator", "worker_lost", "tool"}
)

// recordMethod is the MCP method of an audited call: records do not name
// it, and the coordinator records only tools/call today.
func recordMethod(*pb.AuditRecord) string { return "tools/call" }

// query is an audit search as the form sends it.
type query struct {
	Since, Tool, Method, Outcome, Initiator, Principal, Call string
}

func parseQuery(r *http.Request) query {
	q := r.URL.Query()
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	return query{
		Since: get("since"), Tool: get("tool"), Method: get("method"), Outcome: get("outcome"),
		Initiator: get("initiator"), Principal: get("principal"), Call: strings.ToLower(get("call")),
	}
}

// request is the ListAudit request for the search: the coordinator
// applies every filter. matches applies them again, as a coordinator
// older than some of them ignores those.
func (q query) request(now time.Time) (*pb.ListAuditRequest, error) {
	req := &pb.ListAuditRequest{
		Tool: q.Tool, Outcome: q.Outcome, Principal: q.Principal, Method: q.Method,
		Initiator: client.InitiatorFromName(q.Initiator), CallIdPrefix: q.Call,
	}
	if q.Since != "" {
		d, err := time.ParseDuration(q.Since)
		if err != nil || d < 0 {
			return nil, errors.New("since is a duration, like 15m or 2h")
		}
		req.Since = timestamppb.New(now.Add(-d))
	}
	if strings.Trim(q.Call, "0123456789abcdef") != "" || len(q.Call) > 32 {
		return nil, errors.New("call is a call id or its start, in hex")
	}
	return req, nil
}

func (q query) matches(r *pb.AuditRecord) bool {
	return strings.HasPrefix(r.GetCallId(), q.Call) &&
		(q.Method == "" || recordMethod(r) == q.Method) &&
		(q.Initiator == "" || client.InitiatorName(r.GetInitiator()) == q.Initiator) &&
		(q.Principal == "" || r.GetPrincipal() == q.Principal)
}

type auditData struct {
	Query                 query
	Outcomes, Initiators  []string
	Rows                  []decisionRow
	Shown, LeftOut, Total int
	Err                   string
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	q := parseQuery(r)
	d := auditData{Query: q, Outcomes: outcomes, Initiators: initiators}
	req, err := q.request(c.opts.Now())
	if err != nil {
		d.Err = err.Error()
		c.render(w, r, "audit", "Audit", d)
		return
	}
	recs, left, err := c.search(r, req, q.matches, maxSearchRows)
	if err != nil {
		c.fail(w, "search the audit", err)
		return
	}
	for _, rec := range recs {
		d.Rows = append(d.Rows, newDecisionRow(rec))
	}
	d.Shown, d.LeftOut, d.Total = len(recs), left, len(recs)+left
	c.render(w, r, "audit", "Audit", d)
}

// step is one moment of a call's life.
type step struct {
	What   string
	When   *time.Time
	Detail string
}

type callData struct {
	Call      *pb.Call
	Running   bool
	CanCancel bool
	Steps     []step
	Picture   *picture // Steps drawn to scale; nil when none has a time
	Records   []decisionRow
}

// callPage is a call's timeline, from its record and its audit records.
func (c *Console) callPage(w http.ResponseWriter, r *http.Request) {
	id := strings.ToLower(r.PathValue("id"))
	if len(id) < callIDLen {
		c.redirectShort(w, r, id)
		return
	}
	resp, err := c.opts.Coordinator.GetCall(r.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: id}})
	if status.Code(err) == codes.NotFound {
		http.Error(w, "No call "+id+" is on record (settled calls are kept for the retention period).", http.StatusNotFound)
		return
	}
	if err != nil {
		c.fail(w, "read call "+id, err)
		return
	}
	recs, _, err := c.search(r, &pb.ListAuditRequest{CallId: id}, nil, 10)
	if err != nil {
		c.fail(w, "read the audit of call "+id, err)
		return
	}
	slices.Reverse(recs) // oldest first
	call := resp.GetCall()
	d := callData{Call: call, Running: call.GetState() == pb.CallState_CALL_STATE_RUNNING, CanCancel: viewerOf(r).CanCancel}
	d.Steps = timeline(call, recs)
	if d.Running {
		d.Steps = append(d.Steps, c.lastProgress(r, call.GetCallId()))
	}
	d.Picture = newPicture(d.Steps, d.Running, c.opts.Now())
	for _, rec := range recs {
		d.Records = append(d.Records, newDecisionRow(rec))
	}
	c.render(w, r, "call", "Call "+call.GetCallId()[:shortID], d)
}

// lastProgress is a running call's last progress as a step: as of its
// worker's last heartbeat, or none reported.
func (c *Console) lastProgress(r *http.Request, id string) step {
	resp, err := c.opts.Admin.ListCalls(r.Context(), &pb.ListCallsRequest{CallIdPrefix: id})
	if err != nil {
		c.opts.Logger.Warn("console: reading a call's progress", "call", id, "err", err)
		return step{"last progress", nil, "could not be read: " + status.Convert(err).Message()}
	}
	for _, rc := range resp.GetCalls() {
		if rc.GetCall().GetCallId() == id && rc.GetLastProgress() != nil {
			return step{"last progress", tsPtr(rc.GetLastProgress()), progressText(rc) + " (as of the worker's last heartbeat)"}
		}
	}
	return step{"last progress", nil, "none reported (as of the worker's last heartbeat)"}
}

func tsPtr(t *timestamppb.Timestamp) *time.Time {
	if t == nil {
		return nil
	}
	v := t.AsTime()
	return &v
}

// timeline lays out what the records say happened, in order. A moment the
// coordinator does not record is said to be unknown, never guessed.
func timeline(call *pb.Call, recs []*pb.AuditRecord) []step {
	steps := []step{
		{"requested", tsPtr(call.GetRequestedAt()), "by " + orDash(call.GetPrincipal()) + " via gateway " + orDash(call.GetGateway()) + ", scope " + call.GetKey().GetScope() + ", request id " + requestID(call.GetKey().GetRequestId())},
		{"placed", tsPtr(call.GetRequestedAt()), "on worker " + call.GetWorker() + " (in the same transaction as the request)"},
	}
	if call.GetRetryOf() != "" {
		steps = append(steps, step{"retry of", nil, call.GetRetryOf()})
	}
	if call.GetTraceId() != "" {
		steps = append(steps, step{"trace", nil, "trace id " + call.GetTraceId() + " (look it up in your tracing backend)"})
	}
	var decided *pb.AuditRecord
	for _, rec := range recs {
		if rec.GetOutcome() == "cancel_lost" {
			steps = append(steps, step{"cancel asked (too late)", tsPtr(rec.GetSettledAt()), "by " + client.InitiatorName(rec.GetInitiator()) + ": " + orDash(rec.GetReason())})
			continue
		}
		decided = rec
	}
	if decided == nil {
		return append(steps, step{"decided", nil, "not yet: the call is running"})
	}
	who := client.InitiatorName(decided.GetInitiator())
	if decided.GetOutcome() == "cancelled" {
		steps = append(steps, step{"cancel asked", nil, "by " + who + "; the coordinator records no time apart from the decision"})
	}
	steps = append(steps, step{"decided", tsPtr(decided.GetSettledAt()), strings.TrimSpace(decided.GetOutcome() + " " + paren(who) + " " + decided.GetReason())})
	stopped := step{"handler stopped", tsPtr(decided.GetStoppedAt()), ""}
	if stopped.When == nil {
		stopped.Detail = "not reported yet"
	}
	slices.SortStableFunc(steps[2:], func(a, b step) int {
		if a.When == nil || b.When == nil {
			return 0
		}
		return a.When.Compare(*b.When)
	})
	return append(steps, stopped)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// callIDLen is the length of a full call id (hex).
const callIDLen = 32

// redirectShort sends a call's short id (the first characters the pages
// and the CLI show) to its page under its full id: a running call's,
// else one on the audit record. A prefix that names several calls, or
// none, says so.
func (c *Console) redirectShort(w http.ResponseWriter, r *http.Request, prefix string) {
	if prefix == "" || strings.Trim(prefix, "0123456789abcdef") != "" {
		http.Error(w, "A call id is hex digits: "+prefix+" is not one.", http.StatusNotFound)
		return
	}
	ids := map[string]bool{}
	running, err := c.opts.Admin.ListCalls(r.Context(), &pb.ListCallsRequest{CallIdPrefix: prefix})
	if err != nil {
		c.fail(w, "list calls starting with "+prefix, err)
		return
	}
	for _, rc := range running.GetCalls() {
		ids[rc.GetCall().GetCallId()] = true
	}
	if len(ids) == 0 {
		recs, _, err := c.search(r, &pb.ListAuditRequest{CallIdPrefix: prefix}, nil, 10)
		if err != nil {
			c.fail(w, "search the audit for "+prefix, err)
			return
		}
		for _, rec := range recs {
			ids[rec.GetCallId()] = true
		}
	}
	switch len(ids) {
	case 0:
		http.Error(w, "No call whose id starts with "+prefix+" is running or on record.", http.StatusNotFound)
	case 1:
		for id := range ids {
			http.Redirect(w, r, "/calls/"+id, http.StatusSeeOther)
		}
	default:
		http.Error(w, "Several calls' ids start with "+prefix+"; give more of the id.", http.StatusNotFound)
	}
}
