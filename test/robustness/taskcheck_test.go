package robustness

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// goodTaskHistory is goodHistory plus four tasks, seen correctly: one
// completed and read through both gateways, one cancelled by its client,
// one whose creating session was closed at once, and one whose creating
// gateway was killed and whose result the other served.
func goodTaskHistory() *History {
	h := goodHistory()
	record := func(id, state, initiator string, settled int, stored bool) *ServerCall {
		outcome := state
		return &ServerCall{CallID: id, Principal: "q" + id, Gateway: "gw0", RequestID: json.RawMessage("1"), Tool: taskTool,
			Worker: "w0", Requested: at(0), Deadline: at(5000), Task: true, TaskTTL: 5 * time.Second, ResultStored: stored,
			States: []StateChange{{State: "running", Revision: 20}, {State: state, Initiator: initiator, Settled: at(settled), Revision: 21, Seen: at(settled + 5)}},
			Audits: []Audit{{Outcome: outcome, Initiator: initiator, Settled: at(settled), Key: "a" + id, TaskID: id}}}
	}
	h.Server["k1"] = record("k1", "completed", "", 1500, true)
	h.Server["k2"] = record("k2", "cancelled", "client", 500, false)
	h.Server["k3"] = record("k3", "completed", "", 1500, true)
	h.Server["k4"] = record("k4", "completed", "", 1500, true)
	result := func(id string, gw, sent, got int) TaskOp {
		return TaskOp{Method: "tasks/result", Gateway: gw, Sent: at(sent), At: at(got), Status: "completed", Related: id,
			Result: json.RawMessage(`{"content":[{"type":"text","text":"computed ` + id + ` after 1.5s"}]}`), Text: "computed " + id + " after 1.5s"}
	}
	task := func(id, kind string, ops ...TaskOp) *ClientTask {
		return &ClientTask{Ref: "task-" + kind + "/" + id, Principal: "q" + id, Kind: kind, Tool: taskTool,
			Args: map[string]any{"seconds": 1.5, "label": id}, Expected: "computed " + id + " after 1.5s",
			CreateSent: at(-10), Created: at(5), TaskID: id, CreatedAt: at(0), TTL: 5 * time.Second, ServeOn: -1, Ops: ops}
	}
	h.Tasks = []*ClientTask{
		task("k1", "result",
			TaskOp{Method: "tasks/get", Gateway: 1, Sent: at(200), At: at(210), Status: "working"},
			TaskOp{Method: "tasks/get", Gateway: 0, Sent: at(1490), At: at(1520), Status: "working"}, // sent before it ended
			TaskOp{Method: "tasks/get", Gateway: 0, Sent: at(1600), At: at(1610), Status: "completed"},
			result("k1", 1, 1620, 1630),
			TaskOp{Method: "tasks/list", Gateway: 1, Sent: at(1640), At: at(1650), Status: "completed"},
			TaskOp{Method: "tasks/cancel", Gateway: 0, Sent: at(1660), At: at(1670), Status: "completed", Code: -32602},
			TaskOp{Method: "tasks/get", Gateway: 1, Sent: at(5990), At: at(6000), Status: "unknown", Code: -32602}, // expired
			TaskOp{Method: "tasks/get", Gateway: 1, Sent: at(100), At: at(150), Broken: "connection refused"},
		),
		task("k2", "cancel",
			TaskOp{Method: "tasks/cancel", Gateway: 1, Sent: at(400), At: at(505), Status: "cancelled", Won: true},
			TaskOp{Method: "tasks/get", Gateway: 0, Sent: at(2000), At: at(2010), Status: "cancelled"},
			TaskOp{Method: "tasks/cancel", Gateway: 0, Sent: at(2020), At: at(2030), Status: "cancelled", Code: -32602},
			TaskOp{Method: "tasks/result", Gateway: 1, Sent: at(2040), At: at(2050), Status: "cancelled", Code: -32603},
			TaskOp{Method: "tasks/list", Gateway: 1, Sent: at(2060), At: at(2070), Status: "cancelled"},
		),
		task("k3", "abandon", result("k3", 1, 20, 1520)),
		task("k4", FKillGateway, TaskOp{Method: "tasks/get", Gateway: 0, Sent: at(30), At: at(40), Status: "working"}, result("k4", 0, 50, 1520)),
	}
	h.Tasks[0].Reference = json.RawMessage(`{"content":[{"text":"computed k1 after 1.5s","type":"text"}]}`)
	h.Tasks[3].CreatedOn, h.Tasks[3].ServeOn = 1, 0
	return h
}

func TestTaskCheckerAcceptsAGoodHistory(t *testing.T) {
	if vs := Check(goodTaskHistory()); len(vs) != 0 {
		t.Fatalf("violations in a good history:\n%s", Report(0, vs))
	}
	// A probe's task whose TTL ran out before it ended (its gateway was
	// killed before the run began; the janitor failed it): the other
	// gateway rightly says it is gone.
	h0 := goodTaskHistory()
	s0 := h0.Server["k4"]
	s0.States[1].State, s0.States[1].Initiator, s0.States[1].Settled, s0.States[1].Seen = "failed", "timeout", at(7000), at(7005)
	s0.Audits[0].Outcome, s0.Audits[0].Initiator, s0.Audits[0].Settled, s0.ResultStored = "failed", "timeout", at(7000), false
	h0.Tasks[3].Ops[1] = TaskOp{Method: "tasks/result", Gateway: 0, Sent: at(50), At: at(7010), Status: "unknown", Code: -32602}
	if vs := Check(h0); len(vs) != 0 {
		t.Fatalf("violations in a probe whose task expired before it ended:\n%s", Report(0, vs))
	}
	// A task that failed, its worker lost: tasks/result is its error result.
	h := goodTaskHistory()
	s := h.Server["k3"]
	s.States[1].State, s.States[1].Initiator, s.Audits[0].Outcome, s.ResultStored = "failed", "worker_lost", "failed", false
	h.Tasks[2].Ops[0].Status, h.Tasks[2].Ops[0].Text = "failed", "the tool failed: worker lost"
	if vs := Check(h); len(vs) != 0 {
		t.Fatalf("violations for a failed task:\n%s", Report(0, vs))
	}
}

// TestTaskCheckerFlagsBadHistories breaks one task promise at a time and
// wants exactly the violations named.
func TestTaskCheckerFlagsBadHistories(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(h *History)
		want   []string
	}{
		{"a terminal status moved", func(h *History) { h.Tasks[0].Ops[2].Status = "failed" }, []string{VTaskStatusMoved}},
		{"working read after the task ended", func(h *History) { h.Tasks[0].Ops[1].Sent = at(1506) }, []string{VTaskStatusMoved}},
		{"a cancelled task read completed", func(h *History) { h.Tasks[1].Ops[1].Status = "completed" }, []string{VTaskCancelledCompleted}},
		{"a cancelled task's result stored", func(h *History) { h.Server["k2"].ResultStored = true }, []string{VTaskCancelledCompleted}},
		{"a failed task's result stored", func(h *History) {
			s := h.Server["k3"]
			s.States[1].State, s.States[1].Initiator, s.Audits[0].Outcome = "failed", "worker_lost", "failed"
			h.Tasks[2].Ops[0].Status = "failed"
		}, []string{VTaskStatusMoved}},
		{"the wrong result", func(h *History) { h.Tasks[0].Ops[3].Text = "computed k1 after 2s" }, []string{VTaskResultMismatch}},
		{"not what the plain call returned", func(h *History) {
			h.Tasks[0].Reference = json.RawMessage(`{"content":[{"type":"text","text":"computed k1 after 1.5s"}],"structuredContent":{}}`)
		}, []string{VTaskResultMismatch}},
		{"a result not tagged with its task", func(h *History) { h.Tasks[0].Ops[3].Related = "" }, []string{VTaskResultMismatch}},
		{"a second tasks/cancel won", func(h *History) { h.Tasks[1].Ops[2].Code, h.Tasks[1].Ops[2].Won = 0, true }, []string{VTaskCancelTerminal}},
		{"a tasks/cancel won on a completed task", func(h *History) {
			h.Tasks[0].Ops[5] = TaskOp{Method: "tasks/cancel", Gateway: 0, Sent: at(1660), At: at(1670), Status: "cancelled", Won: true}
		}, []string{VTaskCancelTerminal, VTaskStatusMoved}},
		{"no task while its TTL ran", func(h *History) { h.Tasks[0].Ops[6].At = at(4990) }, []string{VTaskLost}},
		{"left out of tasks/list while its TTL ran", func(h *History) { h.Tasks[1].Ops[4].Status = "absent" }, []string{VTaskLost}},
		{"created but never stored", func(h *History) { delete(h.Server, "k1") }, []string{VTaskLost}},
		{"completed, result never stored", func(h *History) {
			h.Server["k3"].ResultStored = false
		}, []string{VTaskLost}},
		{"cancelled as its session closed", func(h *History) {
			s := h.Server["k3"]
			s.States[1].State, s.States[1].Initiator, s.Audits[0].Outcome, s.ResultStored = "cancelled", "disconnect", "cancelled", false
			h.Tasks[2].Ops[0].Status, h.Tasks[2].Ops[0].Broken = "", "EOF"
		}, []string{VTaskEndedUnasked}},
		{"cancelled by a client that sent no tasks/cancel in time", func(h *History) {
			h.Tasks[1].Ops[0].Sent, h.Tasks[1].Ops[0].Won, h.Tasks[1].Ops[0].Code = at(600), false, -32602
		}, []string{VTaskEndedUnasked}},
		{"not served after its gateway was killed", func(h *History) {
			h.Tasks[3].Ops[1].Status, h.Tasks[3].Ops[1].Broken = "", "HTTP 503"
		}, []string{VTaskNotServed}},
		{"served by the gateway that was killed", func(h *History) { h.Tasks[3].Ops[1].Gateway = 1 }, []string{VTaskNotServed}},
		{"served as gone though it ended within its TTL", func(h *History) {
			h.Tasks[3].Ops[1] = TaskOp{Method: "tasks/result", Gateway: 0, Sent: at(50), At: at(5100), Status: "unknown", Code: -32602}
		}, []string{VTaskNotServed}},
		{"a decision audited without its task id", func(h *History) { h.Server["k1"].Audits[0].TaskID = "" }, []string{VAuditMismatch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := goodTaskHistory()
			tc.break_(h)
			vs := Check(h)
			var got []string
			for _, v := range vs {
				if !slices.Contains(got, v.Kind) {
					got = append(got, v.Kind)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Fatalf("want %v, got:\n%s", want, Report(0, vs))
			}
		})
	}
}
