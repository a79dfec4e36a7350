package robustness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
)

// Violation is one broken promise, with the history that shows it.
type Violation struct {
	Kind    string      `json:"kind"`
	Detail  string      `json:"detail"`
	Client  *ClientCall `json:"client,omitempty"`
	Server  *ServerCall `json:"server,omitempty"`
	Subject string      `json:"subject"`
}

func (v Violation) String() string {
	b, _ := json.MarshalIndent(struct {
		Client *ClientCall `json:"client,omitempty"`
		Server *ServerCall `json:"server,omitempty"`
	}{v.Client, v.Server}, "  ", "  ")
	return fmt.Sprintf("%s: %s: %s\n  history: %s", v.Kind, v.Subject, v.Detail, b)
}

// Violation kinds.
const (
	VTwoOutcomes         = "two_outcomes"
	VLeftRunning         = "left_running"
	VAuditCount          = "audit_count"
	VAuditMismatch       = "audit_mismatch"
	VLate                = "settled_late"
	VResponseMismatch    = "response_mismatch"
	VResponseAfterCancel = "response_after_cancel"
	VProgressAfterEnd    = "progress_after_end"
	VTwoResponses        = "two_responses"
	VLostResponse        = "lost_response"
	VResultWithoutCall   = "result_without_call"
	VHandlerRunning      = "handler_running"
	VLeakedKey           = "leaked_key"
	VListedUnknown       = "listed_unknown"
	VBadRetry            = "bad_retry"
	VUnanswered          = "unanswered"
	VProbeLate           = "probe_late"
	VNotLinearizable     = "not_linearizable"
	// VSeenWithoutRecord: norecord.go.
)

// outcomeToolError is the audit outcome of a call that completed with the
// tool's own error (isError): its record says completed.
const outcomeToolError = "tool_error"

// Terminal call states.
const (
	stRunning   = "running"
	stCompleted = "completed"
	stCancelled = "cancelled"
	stFailed    = "failed"
)

// lostBegin says a response is the gateway's answer to a Begin whose
// outcome it could not learn: the call could not be started.
func lostBegin(r *Response) bool {
	return r.Kind == "rpc_error" && strings.Contains(r.Text, "could not be started")
}

// progressGrace is how long after a decision a progress notification
// already on its way may still arrive: a generous ceiling, not a timing
// assumption.
const progressGrace = 2 * time.Second

// answerBound is how long after a decision a client that did not cancel
// the call itself may wait for its answer, beyond the lease TTL: issue
// 14's bound for a worker gone silent (the lease TTL plus 10 s).
const answerBound = 10 * time.Second

// Check returns every violation in h.
func Check(h *History) []Violation {
	var vs []Violation
	byKey := indexServer(h.Server)
	clientOf := map[*ServerCall]*ClientCall{}
	for _, c := range h.Client {
		s := byKey[clientKey(c)]
		if s != nil {
			clientOf[s] = c
		}
		vs = append(vs, checkClient(c, s)...)
		vs = append(vs, checkAnswered(h, c, s)...)
	}
	ids := make([]string, 0, len(h.Server))
	for id := range h.Server {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := h.Server[id]
		for _, v := range append(checkServer(h, s), checkRetry(h, s, clientOf[s])...) {
			v.Client = clientOf[s]
			vs = append(vs, v)
		}
	}
	vs = append(vs, checkRecorded(h, byKey).vs...)
	for w, n := range h.InFlight {
		if n != 0 {
			vs = append(vs, Violation{Kind: VHandlerRunning, Subject: "worker " + w, Detail: fmt.Sprintf("%d calls still in flight at the end (a handler running, or an outcome not settled; see <worker>.goroutines)", n)})
		}
	}
	for _, k := range h.Leaked {
		vs = append(vs, Violation{Kind: VLeakedKey, Subject: k, Detail: "key still in etcd after retention expired"})
	}
	for id, outcomes := range h.Listed {
		s := h.Server[id]
		if s == nil {
			vs = append(vs, Violation{Kind: VListedUnknown, Subject: "call " + id, Detail: fmt.Sprintf("ListAudit returned %v for a call etcd never held", outcomes)})
			continue
		}
		if got := auditOutcomes(s); !subMultiset(outcomes, got) {
			vs = append(vs, Violation{Kind: VAuditMismatch, Subject: "call " + id, Server: s, Detail: fmt.Sprintf("ListAudit says %v, etcd held %v", outcomes, got)})
		}
	}
	return append(vs, CheckTasks(h)...)
}

// checkServer checks one call record's own life: one decision, audited
// once, in time.
func checkServer(h *History, s *ServerCall) []Violation {
	var vs []Violation
	bad := func(kind, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Subject: "call " + s.CallID, Server: s, Detail: fmt.Sprintf(format, args...)})
	}
	var decided []string
	for i, st := range s.States {
		if st.State == stRunning {
			if i > 0 {
				bad(VTwoOutcomes, "record went back to running after %v", decided)
			}
			continue
		}
		if len(decided) == 0 || decided[len(decided)-1] != st.State {
			decided = append(decided, st.State)
		}
	}
	if s.Created > 1 {
		bad(VTwoOutcomes, "its record was created %d times (decided %v)", s.Created, decided)
	}
	switch {
	case len(decided) > 1:
		bad(VTwoOutcomes, "decided %v", decided)
	case len(decided) == 0:
		bad(VLeftRunning, "never reached a terminal state")
	}
	final := s.Final()
	var terminal []string
	lost := 0
	for _, a := range s.Audits {
		switch a.Outcome {
		case "cancel_lost":
			lost++
		case outcomeToolError:
			terminal = append(terminal, stCompleted) // completed, with the tool's own error
		default:
			terminal = append(terminal, a.Outcome)
		}
	}
	if len(decided) > 0 {
		if len(terminal) != 1 {
			bad(VAuditCount, "%d decision audit records %v, want 1", len(terminal), terminal)
		} else if terminal[0] != final.State {
			bad(VAuditMismatch, "audit says %s, record says %s", terminal[0], final.State)
		}
	}
	if lost > 1 {
		bad(VAuditCount, "%d cancel_lost records, want at most 1", lost)
	}
	if !final.Settled.IsZero() && !s.Deadline.IsZero() {
		if limit, outage := h.settleLimit(s.Deadline); final.Settled.After(limit) {
			bad(VLate, "settled %v after its deadline (limit: lease TTL %v + slack %v + etcd outages %v)", final.Settled.Sub(s.Deadline), h.LeaseTTL, h.Slack, outage)
		}
	}
	return vs
}

// checkRetry checks a call that retries another: that one failed because
// its worker was lost, was no retry itself, was the same client's call of
// the same tool, ran on another worker, and the client had seen none of
// its progress; the retry does not outlive its deadline.
func checkRetry(h *History, s *ServerCall, c *ClientCall) []Violation {
	if s.RetryOf == "" {
		return nil
	}
	var vs []Violation
	bad := func(format string, args ...any) {
		vs = append(vs, Violation{Kind: VBadRetry, Subject: "call " + s.CallID, Server: s, Detail: fmt.Sprintf(format, args...)})
	}
	lost := h.Server[s.RetryOf]
	if lost == nil {
		bad("retries call %s, which etcd never held", s.RetryOf)
		return vs
	}
	final := lost.Final()
	switch {
	case final.State != stFailed || final.Initiator != "worker_lost":
		bad("retries call %s, which ended %s by %q, not failed with its worker lost", lost.CallID, final.State, final.Initiator)
	case lost.RetryOf != "":
		bad("retries call %s, itself a retry of %s", lost.CallID, lost.RetryOf)
	case lost.Principal != s.Principal || lost.Gateway != s.Gateway || compactID(lost.RequestID) != compactID(s.RequestID) || lost.Tool != s.Tool:
		bad("retries call %s, another client's call or another tool's", lost.CallID)
	case lost.Worker == s.Worker:
		bad("runs on %s, the worker call %s was lost with", s.Worker, lost.CallID)
	case s.Deadline.After(lost.Deadline):
		bad("deadline %v past call %s's", s.Deadline.Sub(lost.Deadline), lost.CallID)
	}
	if c != nil {
		for _, p := range c.Progress {
			if p.Before(s.Requested) {
				bad("placed %v after progress of call %s reached the client", s.Requested.Sub(p), lost.CallID)
				break
			}
		}
	}
	return vs
}

// checkClient checks what a client saw against the decision.
func checkClient(c *ClientCall, s *ServerCall) []Violation {
	var vs []Violation
	bad := func(kind, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Subject: c.Ref, Client: c, Server: s, Detail: fmt.Sprintf(format, args...)})
	}
	if len(c.Responses) > 1 {
		bad(VTwoResponses, "%d responses for one request", len(c.Responses))
	}
	var resp *Response
	if len(c.Responses) > 0 {
		resp = &c.Responses[0]
	}
	if resp != nil {
		for _, p := range c.Progress {
			if p.After(resp.At) {
				bad(VProgressAfterEnd, "progress %v after the response", p.Sub(resp.At))
				break
			}
		}
	}
	if s == nil {
		if resp != nil && resp.Kind == "result" {
			bad(VResultWithoutCall, "a result reached the client but etcd never held the call")
		}
		return vs
	}
	final := s.Final()
	switch final.State {
	case stCompleted:
		switch {
		case resp == nil:
			if c.CancelSent.IsZero() && c.Disconnect.IsZero() && c.Broken.IsZero() {
				bad(VLostResponse, "call COMPLETED but the client, which neither cancelled nor lost its connection, got no response")
			}
		case resp.Kind == "error_result" && strings.Contains(resp.Text, "result was lost"):
			// The gateway lost the worker's stream after Complete won and
			// says so: the documented error result for a COMPLETED call.
		case s.toolError() && resp.Kind != "error_result":
			bad(VResponseMismatch, "call COMPLETED with the tool's own error (audit: tool_error) but the client got %s %q", resp.Kind, resp.Text)
		case !s.toolError() && resp.Kind != "result":
			bad(VResponseMismatch, "call COMPLETED but the client got %s %q", resp.Kind, resp.Text)
		}
	case stFailed:
		switch {
		case resp == nil:
			if c.CancelSent.IsZero() && c.Disconnect.IsZero() && c.Broken.IsZero() {
				bad(VLostResponse, "call FAILED but the client, which neither cancelled nor lost its connection, got no error result")
			}
		case resp.Kind == "result":
			bad(VResponseMismatch, "call FAILED but the client got a result %q", resp.Text)
		}
	case stCancelled:
		// The client's own cancel (or its going away) is never answered;
		// a cancel by anyone else is answered with an error. "disconnect"
		// is the client's going away only if it did go, and only if the
		// gateway recorded it: a worker whose link to the gateway broke
		// cancels as "disconnect" (caller gone) while the client still
		// waits, or while its own leaving is still on the way.
		byClient := final.Initiator == "client" ||
			(final.Initiator == "disconnect" && !c.ownEnd().IsZero() && final.Reason != worker.ReasonCallerGone)
		switch {
		case resp == nil:
		case byClient && final.Initiator == "disconnect" && lostBegin(resp) && resp.At.Before(c.ownEnd()):
			// The gateway lost Begin's reply and, finding no call, told
			// the client it could not start; the Begin committed later
			// (its coordinator died with the Txn in etcd's pipeline), and
			// the client's going away settled it first, where the janitor
			// would have failed it past its deadline. The answer came
			// before the cancel, and nothing ran.
		case byClient:
			bad(VResponseAfterCancel, "call CANCELLED (%s) but the client got %s %q", final.Initiator, resp.Kind, resp.Text)
		case resp.Kind == "result":
			bad(VResponseMismatch, "call CANCELLED (%s) but the client got a result %q", final.Initiator, resp.Text)
		}
		for _, p := range c.Progress {
			if !final.Settled.IsZero() && p.After(final.Settled.Add(progressGrace)) {
				bad(VProgressAfterEnd, "progress %v after the cancellation was accepted", p.Sub(final.Settled))
				break
			}
		}
	}
	return vs
}

// checkAnswered checks that a client that did not itself cancel the call
// (nor close its session, nor lose its connection) is answered: with a
// response or an error, within the lease TTL plus answerBound of the
// call's decision, whoever made it; and that a fault's probe is answered
// and decided within the fault's own bounds.
func checkAnswered(h *History, c *ClientCall, s *ServerCall) []Violation {
	var vs []Violation
	bad := func(kind, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Subject: c.Ref, Client: c, Server: s, Detail: fmt.Sprintf(format, args...)})
	}
	var resp *Response
	if len(c.Responses) > 0 {
		resp = &c.Responses[0]
	}
	own := c.ownEnd()
	answeredBy := func(due time.Time) bool {
		return (resp != nil && !resp.At.After(due)) || (!own.IsZero() && own.Before(due))
	}
	if !c.AnswerBy.IsZero() && !answeredBy(c.AnswerBy) {
		bad(VUnanswered, "probe of %s: no answer within its bound (%v after it was sent)", c.Probe, c.AnswerBy.Sub(c.Sent))
	}
	if s == nil {
		if resp == nil && own.IsZero() {
			bad(VUnanswered, "etcd never held the call, and the client, which did not cancel, got no error")
		}
		return vs
	}
	final := s.Final()
	if !c.DecideBy.IsZero() && (final.Settled.IsZero() || final.Settled.After(c.DecideBy)) {
		bad(VProbeLate, "probe of %s: decided %v after it was sent, past its bound of %v", c.Probe, final.Settled.Sub(c.Sent), c.DecideBy.Sub(c.Sent))
	}
	if c.WantResult && final.State == stCompleted && (resp == nil || resp.Kind != "result") {
		bad(VLostResponse, "probe of %s: the call COMPLETED but its client did not get the result", c.Probe)
	}
	if final.State == stRunning || final.Settled.IsZero() {
		return vs // left_running says it
	}
	if resp == nil && own.IsZero() && final.State != stCancelled {
		return vs // lost_response says it
	}
	if due := final.Settled.Add(h.LeaseTTL + answerBound); !answeredBy(due) {
		switch {
		case resp != nil:
			bad(VUnanswered, "the call was %s by %q; the client, which did not cancel, was answered only %v later", final.State, final.Initiator, resp.At.Sub(final.Settled))
		case !own.IsZero():
			bad(VUnanswered, "the call was %s by %q; the client, which did not cancel, had no answer when it gave up %v later", final.State, final.Initiator, own.Sub(final.Settled))
		default:
			bad(VUnanswered, "the call was %s by %q; the client, which did not cancel, never got an answer", final.State, final.Initiator)
		}
	}
	return vs
}

func clientKey(c *ClientCall) string {
	if c.ByGateway {
		return "g|" + c.Owner + "|" + compactID(c.RequestID)
	}
	return "p|" + c.Owner + "|" + compactID(c.RequestID)
}

// indexServer maps client keys to the call records that answer them: of a
// lost call and its retry, the retry.
func indexServer(m map[string]*ServerCall) map[string]*ServerCall {
	idx := make(map[string]*ServerCall, 2*len(m))
	for _, s := range m {
		id := compactID(s.RequestID)
		for _, k := range []string{"p|" + s.Principal + "|" + id, "g|" + s.Gateway + "|" + id} {
			if old := idx[k]; old != nil && old.RetryOf == s.CallID {
				continue // old retries s, so old answers the client
			}
			idx[k] = s
		}
	}
	return idx
}

func compactID(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func auditOutcomes(s *ServerCall) []string {
	var out []string
	for _, a := range s.Audits {
		out = append(out, a.Outcome)
	}
	return out
}

// subMultiset says whether every element of a is in b, as often.
// (ListAudit may miss a record whose retention just ran out.)
func subMultiset(a, b []string) bool {
	n := map[string]int{}
	for _, x := range b {
		n[x]++
	}
	for _, x := range a {
		if n[x]--; n[x] < 0 {
			return false
		}
	}
	return true
}
