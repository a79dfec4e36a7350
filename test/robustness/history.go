package robustness

import (
	"encoding/json"
	"sync"
	"time"
)

// ClientCall is everything one client saw of one tools/call, with times
// from this process's clock (every component runs on this host).
type ClientCall struct {
	// Ref names the call in reports: client kind, session and request id.
	Ref string `json:"ref"`
	// Client is "go-http", "go-stdio", "ts2025" or "ts2026".
	Client string `json:"client"`
	// Owner identifies the client's calls in the call records: the
	// principal for HTTP clients, the gateway's name for stdio ones.
	Owner string `json:"owner"`
	// ByGateway says Owner is a gateway name rather than a principal.
	ByGateway bool `json:"by_gateway,omitempty"`
	// Gateway names the gateway the call went through: gatewayName(i)
	// for the HTTP gateways, the stdio gateway's own name.
	Gateway   string          `json:"gateway,omitempty"`
	RequestID json.RawMessage `json:"request_id,omitempty"`
	Tool      string          `json:"tool"`
	Sent      time.Time       `json:"sent"`
	// CancelSent is when the client cancelled (notifications/cancelled,
	// closing the 2026 stream, or its own timeout); zero if never.
	CancelSent time.Time `json:"cancel_sent,omitzero"`
	// Disconnect is when the client closed its session or connection with
	// the call in flight; zero if never.
	Disconnect time.Time `json:"disconnect,omitzero"`
	// Broken is when the client's transport failed under it (a gateway
	// killed or partitioned), or when it stopped reading; zero if never.
	Broken time.Time `json:"broken,omitzero"`
	// TimedOut says CancelSent is the client's own timeout, not a cancel
	// it chose: it gave up waiting.
	TimedOut bool `json:"timed_out,omitempty"`
	// Probe names the fault a call was made to probe; AnswerBy and
	// DecideBy, when set, are that fault's bounds: the client holds an
	// answer, and the call is decided, by then.
	Probe string `json:"probe,omitempty"`
	// WantResult says the probe's call, if it completed, must bring its
	// result, not the gateway's "result was lost" error.
	WantResult bool        `json:"want_result,omitempty"`
	AnswerBy   time.Time   `json:"answer_by,omitzero"`
	DecideBy   time.Time   `json:"decide_by,omitzero"`
	Progress   []time.Time `json:"progress,omitempty"`
	Responses  []Response  `json:"responses,omitempty"`
}

// Response is one response on the wire for a call.
type Response struct {
	At time.Time `json:"at"`
	// Kind is "result", "error_result" (isError) or "rpc_error".
	Kind string `json:"kind"`
	Text string `json:"text,omitempty"`
}

// ServerCall is what etcd held for one call over the run: every value of
// its record, and every audit record naming it.
type ServerCall struct {
	CallID    string          `json:"call_id"`
	Scope     string          `json:"scope"`
	Principal string          `json:"principal"`
	Gateway   string          `json:"gateway"`
	RequestID json.RawMessage `json:"request_id"`
	Tool      string          `json:"tool"`
	Worker    string          `json:"worker"`
	Requested time.Time       `json:"requested_at"`
	Deadline  time.Time       `json:"deadline"`
	RetryOf   string          `json:"retry_of,omitempty"` // the lost call this one retries
	// Task says the call runs an MCP task, of TaskTTL; ResultStored that
	// its result was written (task-results/).
	Task         bool          `json:"task,omitempty"`
	TaskTTL      time.Duration `json:"task_ttl,omitempty"`
	ResultStored bool          `json:"result_stored,omitempty"`
	States       []StateChange `json:"states"`
	Audits       []Audit       `json:"audits,omitempty"`
	// Created is how many times the call's record was created: once, or
	// more if it expired and was written anew (an equal state written
	// again adds no StateChange).
	Created int `json:"created"`
}

// StateChange is one stored value of a call record.
type StateChange struct {
	State     string    `json:"state"`
	Initiator string    `json:"initiator,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Settled   time.Time `json:"settled_at,omitzero"`
	Revision  int64     `json:"revision"`
	// Seen is when the harness's watch delivered it: after its commit.
	Seen time.Time `json:"seen,omitzero"`
}

// Audit is one audit record.
type Audit struct {
	Outcome   string    `json:"outcome"`
	Initiator string    `json:"initiator"`
	Settled   time.Time `json:"settled_at"`
	Key       string    `json:"key"`
	TaskID    string    `json:"task_id,omitempty"`
}

// ownEnd is when the client itself ended its wait: it cancelled (or timed
// out), closed its session, or lost its transport; zero if it never did.
func (c *ClientCall) ownEnd() time.Time {
	var end time.Time
	for _, t := range []time.Time{c.CancelSent, c.Disconnect, c.Broken} {
		if !t.IsZero() && (end.IsZero() || t.Before(end)) {
			end = t
		}
	}
	return end
}

// toolError says the call's decision was audited as the tool's own error.
func (s *ServerCall) toolError() bool {
	for _, a := range s.Audits {
		if a.Outcome == outcomeToolError {
			return true
		}
	}
	return false
}

// Final returns the call's last stored state.
func (s *ServerCall) Final() StateChange {
	if len(s.States) == 0 {
		return StateChange{}
	}
	return s.States[len(s.States)-1]
}

// History is the input of the checker.
type History struct {
	Seed     int64
	LeaseTTL time.Duration
	// Slack is added to every time bound: process start-up, pauses of the
	// checker itself, a loaded machine.
	Slack  time.Duration
	Client []*ClientCall
	Server map[string]*ServerCall
	// InFlight is, per worker, the calls still in flight at the end: a
	// handler running, or an outcome not yet settled.
	InFlight map[string]int
	// Leaked lists call, index, owner and audit keys left after retention.
	Leaked []string
	// Listed are the audit records a coordinator's ListAudit returned at
	// the end, as call id -> outcomes, to cross-check the etcd watch.
	Listed map[string][]string
	// Tasks is what the task clients saw (taskcheck.go).
	Tasks []*ClientTask
	// EtcdOutages are the spans in which etcd committed nothing
	// (etcdprobe.go), oldest first.
	EtcdOutages []Outage
	// Kills are the workers and gateways the faults killed, in order.
	Kills []Kill
}

// settleLimit is when a call with this deadline must have settled: a lease
// TTL and the slack past its deadline, later by every etcd outage that
// began before that limit (nothing is decided while etcd cannot commit).
func (h *History) settleLimit(deadline time.Time) (limit time.Time, outage time.Duration) {
	limit = deadline.Add(h.LeaseTTL + h.Slack)
	for _, o := range h.EtcdOutages {
		if !o.To.After(deadline) {
			continue
		}
		if o.From.After(limit) {
			break
		}
		d := o.To.Sub(later(o.From, deadline))
		limit, outage = limit.Add(d), outage+d
	}
	return limit, outage
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// recorder collects client calls from many goroutines.
type recorder struct {
	mu    sync.Mutex
	calls []*ClientCall
}

func (r *recorder) add(c *ClientCall) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []*ClientCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*ClientCall(nil), r.calls...)
}
