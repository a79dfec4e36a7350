package robustness

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// goodHistory is one completed call, one cancelled call, one call lost
// with its worker and completed by its retry, and one cancelled by its
// worker's drain and answered with an error, all seen correctly by their
// clients.
func goodHistory() *History {
	return &History{
		LeaseTTL: 2 * time.Second, Slack: time.Second,
		Client: []*ClientCall{
			{Ref: "done", Client: "go-http", Owner: "p1", RequestID: json.RawMessage("1"), Tool: "sleep", Sent: at(0),
				Progress: []time.Time{at(50)}, Responses: []Response{{At: at(110), Kind: "result", Text: "slept 0.1s"}}},
			{Ref: "cancelled", Client: "go-http", Owner: "p1", RequestID: json.RawMessage("2"), Tool: "sleep", Sent: at(0),
				CancelSent: at(40), Progress: []time.Time{at(20)}},
			{Ref: "retried", Client: "go-http", Owner: "p1", RequestID: json.RawMessage("3"), Tool: "sleep", Sent: at(0),
				Progress: []time.Time{at(400)}, Responses: []Response{{At: at(600), Kind: "result", Text: "slept 0.3s"}}},
			{Ref: "drained", Client: "go-http", Owner: "p1", RequestID: json.RawMessage("4"), Tool: "sleep", Sent: at(0),
				Responses: []Response{{At: at(310), Kind: "error_result", Text: "the worker shut down"}}},
		},
		Server: map[string]*ServerCall{
			"a": {CallID: "a", Principal: "p1", Gateway: "gw0", RequestID: json.RawMessage("1"), Deadline: at(5000),
				States: []StateChange{{State: "running", Revision: 2}, {State: "completed", Settled: at(100), Revision: 5}},
				Audits: []Audit{{Outcome: "completed", Settled: at(100), Key: "k1"}}},
			"b": {CallID: "b", Principal: "p1", Gateway: "gw0", RequestID: json.RawMessage("2"), Deadline: at(5000),
				States: []StateChange{{State: "running", Revision: 3}, {State: "cancelled", Initiator: "client", Settled: at(45), Revision: 4}},
				Audits: []Audit{{Outcome: "cancelled", Initiator: "client", Settled: at(45), Key: "k2"}}},
			"c": {CallID: "c", Principal: "p1", Gateway: "gw0", RequestID: json.RawMessage("3"), Tool: "sleep", Worker: "w0", Deadline: at(5000),
				States: []StateChange{{State: "running", Revision: 6}, {State: "failed", Initiator: "worker_lost", Settled: at(200), Revision: 7}},
				Audits: []Audit{{Outcome: "failed", Initiator: "worker_lost", Settled: at(200), Key: "k4"}}},
			"d": {CallID: "d", Principal: "p1", Gateway: "gw0", RequestID: json.RawMessage("3"), Tool: "sleep", Worker: "w1", Deadline: at(5000),
				Requested: at(300), RetryOf: "c",
				States: []StateChange{{State: "running", Revision: 8}, {State: "completed", Settled: at(590), Revision: 9}},
				Audits: []Audit{{Outcome: "completed", Settled: at(590), Key: "k5"}}},
			"e": {CallID: "e", Principal: "p1", Gateway: "gw0", RequestID: json.RawMessage("4"), Tool: "sleep", Worker: "w2", Deadline: at(5000),
				States: []StateChange{{State: "running", Revision: 10}, {State: "cancelled", Initiator: "shutdown", Settled: at(300), Revision: 11}},
				Audits: []Audit{{Outcome: "cancelled", Initiator: "shutdown", Settled: at(300), Key: "k6"}}},
		},
		InFlight: map[string]int{"w0": 0},
		Listed:   map[string][]string{"a": {"completed"}},
	}
}

func TestCheckerAcceptsAGoodHistory(t *testing.T) {
	if vs := Check(goodHistory()); len(vs) != 0 {
		t.Fatalf("violations in a good history:\n%s", Report(0, vs))
	}
	// A tool's own error: the record says completed, the audit tool_error,
	// and the client has the error result.
	h := goodHistory()
	h.Server["a"].Audits[0].Outcome = "tool_error"
	h.Listed = map[string][]string{"a": {"tool_error"}}
	h.Client[0].Responses[0].Kind = "error_result"
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("violations for a tool's own error:\n%s", Report(0, vs))
	}
	// A worker that lost its link to the gateway cancels as "disconnect"
	// (caller gone); the client, still there, is answered with an error.
	h = goodHistory()
	h.Server["e"].States[1].Initiator, h.Server["e"].Audits[0].Initiator = "disconnect", "disconnect"
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("violations for a live client answered after its caller-gone cancel:\n%s", Report(0, vs))
	}
	// A Begin whose reply was lost: the client was told the call could not
	// start; the Begin committed late, and the client's going away
	// cancelled the record (soak 4, seed 1796139353287150048).
	h = goodHistory()
	h.Client[1].CancelSent, h.Client[1].Disconnect = time.Time{}, at(60)
	h.Client[1].Responses = []Response{{At: at(30), Kind: "rpc_error", Text: "the call could not be started: error reading from server: EOF"}}
	h.Server["b"].States[1].Initiator, h.Server["b"].Audits[0].Initiator = "disconnect", "disconnect"
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("violations for a late-committed Begin cancelled by the client's going away:\n%s", Report(0, vs))
	}
}

// TestCheckerFlagsBadHistories feeds the checker one broken promise at a
// time and wants exactly that one named.
func TestCheckerFlagsBadHistories(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(h *History)
		want   string
	}{
		{"response after cancel", func(h *History) {
			h.Client[1].Responses = []Response{{At: at(60), Kind: "result", Text: "slept 0.1s"}}
		}, VResponseAfterCancel},
		{"progress after cancel", func(h *History) {
			h.Client[1].Progress = append(h.Client[1].Progress, at(45).Add(progressGrace+time.Millisecond))
		}, VProgressAfterEnd},
		{"two outcomes", func(h *History) {
			s := h.Server["b"]
			s.States = append(s.States, StateChange{State: "completed", Settled: at(60), Revision: 6})
			s.Audits = append(s.Audits, Audit{Outcome: "completed", Settled: at(60), Key: "k3"})
		}, VTwoOutcomes},
		{"missing audit record", func(h *History) { h.Server["b"].Audits = nil }, VAuditCount},
		{"audit twice", func(h *History) {
			h.Server["b"].Audits = append(h.Server["b"].Audits, Audit{Outcome: "cancelled", Key: "k9"})
		}, VAuditCount},
		{"call left running", func(h *History) {
			s := h.Server["a"]
			s.States, s.Audits = s.States[:1], nil
			h.Client[0].Responses = nil
		}, VLeftRunning},
		{"handler still running", func(h *History) { h.InFlight["w0"] = 1 }, VHandlerRunning},
		{"completed but no response", func(h *History) { h.Client[0].Responses = nil }, VLostResponse},
		{"failed but a result", func(h *History) {
			s := h.Server["a"]
			s.States[1].State, s.Audits[0].Outcome = "failed", "failed"
			h.Listed = nil
		}, VResponseMismatch},
		{"two responses", func(h *History) {
			h.Client[0].Responses = append(h.Client[0].Responses, Response{At: at(120), Kind: "result"})
		}, VTwoResponses},
		{"settled late", func(h *History) {
			h.Server["a"].States[1].Settled = at(5000 + 3001)
		}, VLate},
		{"settled later than an etcd outage explains", func(h *History) {
			h.EtcdOutages = []Outage{{From: at(6000), To: at(7000)}, {From: at(20000), To: at(30000)}}
			h.Server["a"].States[1].Settled = at(5000 + 3000 + 1001)
		}, VLate},
		{"leaked key", func(h *History) { h.Leaked = []string{prefix + "calls/a"} }, VLeakedKey},
		{"result for no call", func(h *History) { delete(h.Server, "a"); h.Listed = nil }, VResultWithoutCall},
		{"audit listed but never stored", func(h *History) { h.Listed["zz"] = []string{"failed"} }, VListedUnknown},
		{"retry of a call its worker did not lose", func(h *History) {
			h.Server["c"].States[1].Initiator = "tool"
		}, VBadRetry},
		{"retry of a retry", func(h *History) { h.Server["c"].RetryOf = "a" }, VBadRetry},
		{"retry of another client's call", func(h *History) { h.Server["c"].Principal = "p2" }, VBadRetry},
		{"retry on the lost worker", func(h *History) { h.Server["d"].Worker = "w0" }, VBadRetry},
		{"retry past the deadline", func(h *History) { h.Server["d"].Deadline = at(6000) }, VBadRetry},
		{"retry after progress", func(h *History) {
			h.Client[2].Progress = append(h.Client[2].Progress, at(150))
		}, VBadRetry},
		{"retry of no call", func(h *History) { delete(h.Server, "c") }, VBadRetry},
		{"could not start, said after the client went away", func(h *History) {
			h.Client[1].CancelSent, h.Client[1].Disconnect = time.Time{}, at(20)
			h.Client[1].Responses = []Response{{At: at(30), Kind: "rpc_error", Text: "the call could not be started: EOF"}}
			h.Server["b"].States[1].Initiator, h.Server["b"].Audits[0].Initiator = "disconnect", "disconnect"
		}, VResponseAfterCancel},
		{"an answer after the client went away", func(h *History) {
			h.Server["e"].States[1].Initiator = "disconnect"
			h.Client[3].Disconnect = at(290)
		}, VResponseAfterCancel},
		{"a tool's own error reached the client as a result", func(h *History) {
			h.Server["a"].Audits[0].Outcome = "tool_error"
			h.Listed = nil
		}, VResponseMismatch},
		{"a result for a call cancelled by a drain", func(h *History) {
			h.Client[3].Responses = []Response{{At: at(310), Kind: "result", Text: "slept 1s"}}
		}, VResponseMismatch},
		{"cancelled by a drain, the client never answered", func(h *History) {
			h.Client[3].Responses = nil
		}, VUnanswered},
		{"cancelled by a drain, the client gave up waiting", func(h *History) {
			h.Client[3].Responses = nil
			h.Client[3].CancelSent, h.Client[3].TimedOut = at(300+20000), true
		}, VUnanswered},
		{"failed by the janitor, answered only by the gateway's timeout", func(h *History) {
			s := h.Server["a"]
			s.States[1].State, s.States[1].Initiator, s.Audits[0].Outcome = "failed", "worker_lost", "failed"
			h.Listed = nil
			h.Client[0].Responses = []Response{{At: at(100 + 13000), Kind: "error_result", Text: "timed out"}}
		}, VUnanswered},
		{"completed, the client gave up waiting for the result", func(h *History) {
			h.Client[0].Responses = nil
			h.Client[0].CancelSent, h.Client[0].TimedOut = at(100+20000), true
		}, VUnanswered},
		{"refused at Begin, no error reached the client", func(h *History) {
			delete(h.Server, "a")
			h.Listed = nil
			h.Client[0].Responses = nil
		}, VUnanswered},
		{"a fault's probe answered past its bound", func(h *History) {
			h.Client[3].Probe, h.Client[3].AnswerBy = "drain_worker", at(305)
		}, VUnanswered},
		{"a lost Complete reply's probe got the gateway's error, not the result", func(h *History) {
			h.Client[0].Probe, h.Client[0].WantResult = "lost_complete_reply", true
			h.Client[0].Responses = []Response{{At: at(110), Kind: "error_result", Text: "the result was lost"}}
		}, VLostResponse},
		{"a fault's probe decided past its bound", func(h *History) {
			h.Client[3].Probe, h.Client[3].DecideBy = "slow_reader", at(250)
		}, VProbeLate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := goodHistory()
			tc.break_(h)
			vs := Check(h)
			found := false
			for _, v := range vs {
				found = found || v.Kind == tc.want
			}
			if !found {
				t.Fatalf("want a %s violation, got:\n%s", tc.want, Report(0, vs))
			}
			t.Logf("flagged:\n%s", Report(0, vs))
		})
	}
}

// TestCheckerAllowsEtcdOutages: a call settled late by as long as etcd
// could not commit after its deadline is not late; outages before the
// deadline or after the limit give no allowance.
func TestCheckerAllowsEtcdOutages(t *testing.T) {
	h := goodHistory()
	h.EtcdOutages = []Outage{{From: at(1000), To: at(4000)}, {From: at(7500), To: at(9500)}, {From: at(9900), To: at(10400)}}
	// deadline 5000 + TTL 2000 + slack 1000 = 8000; the second outage
	// (from 7500, 2000 long) moves it to 10000, so the third (from 9900)
	// counts too: 10500.
	if limit, outage := h.settleLimit(at(5000)); !limit.Equal(at(10500)) || outage != 2500*time.Millisecond {
		t.Fatalf("limit %v (outage %v), want %v (2.5s)", limit.Sub(t0), outage, at(10500).Sub(t0))
	}
	h.Server["a"].States[1].Settled = at(10400)
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("violations %v, want none", vs)
	}
	h.Server["a"].States[1].Settled = at(10600)
	if vs := Check(h); len(vs) != 1 || vs[0].Kind != VLate {
		t.Fatalf("violations %v, want one %s", vs, VLate)
	}
}

// TestCheckerCallerGoneIsNotTheClients: a worker that lost its gateway's
// stream cancels as "disconnect" (caller gone). When that wins while the
// client's own leaving is still on the way, the gateway answers with an
// error, which is right; the same answer to a disconnect the gateway
// recorded is a response after the client's cancel.
func TestCheckerCallerGoneIsNotTheClients(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   int
	}{{worker.ReasonCallerGone, 0}, {"the client closed its session", 1}} {
		h := goodHistory()
		c, s := h.Client[1], h.Server["b"]
		c.CancelSent, c.Disconnect = time.Time{}, at(40)
		c.Responses = []Response{{At: at(60), Kind: "error_result", Text: "the call was cancelled because its connection closed (caller gone)"}}
		s.States[1].Initiator, s.States[1].Reason, s.Audits[0].Initiator = "disconnect", tc.reason, "disconnect"
		vs := Check(h)
		if len(vs) != tc.want || tc.want == 1 && vs[0].Kind != VResponseAfterCancel {
			t.Errorf("reason %q: violations %v, want %d %s", tc.reason, vs, tc.want, VResponseAfterCancel)
		}
	}
}
