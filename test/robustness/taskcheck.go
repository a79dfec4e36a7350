package robustness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// ClientTask is everything one client saw of one 2025-11-25 task: the
// task-augmented tools/call that created it, and every tasks/* request
// about it, on either gateway, with times from this process's clock.
type ClientTask struct {
	Ref       string `json:"ref"`
	Principal string `json:"principal"`
	// Kind is the client's plan: "result", "cancel", "abandon" (its
	// creating session is closed at once), or the fault kind of a probe.
	Kind string         `json:"kind"`
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	// Expected is the text of the result the tool returns for Args.
	Expected string `json:"expected"`
	// Reference is the result (without _meta) of a plain tools/call with
	// the same arguments, when the client made one.
	Reference json.RawMessage `json:"reference,omitempty"`
	// CreatedOn is the gateway the task was created on.
	CreatedOn  int       `json:"created_on"`
	CreateSent time.Time `json:"create_sent"`
	// Created is when CreateTaskResult arrived; zero if it did not.
	Created   time.Time `json:"created,omitzero"`
	CreateErr string    `json:"create_error,omitempty"`
	TaskID    string    `json:"task_id,omitempty"`
	// CreatedAt and TTL are the task's, as CreateTaskResult gave them.
	CreatedAt time.Time     `json:"created_at,omitzero"`
	TTL       time.Duration `json:"ttl"`
	// ServeOn, for a probe, is the gateway that must serve the task after
	// CreatedOn was killed; -1 otherwise.
	ServeOn int      `json:"serve_on"`
	Ops     []TaskOp `json:"ops,omitempty"`
}

// TaskOp is one tasks/* request and what came back.
type TaskOp struct {
	Method  string    `json:"method"`
	Gateway int       `json:"gateway"`
	Sent    time.Time `json:"sent"`
	At      time.Time `json:"at"`
	// Status is the task's status the answer stated: working, completed,
	// failed, cancelled (tasks/result: by the result's form), "unknown"
	// for "no such task" (-32602), "absent" when tasks/list left it out;
	// empty when the answer said nothing of it (a transport failure, a
	// store error).
	Status string `json:"status,omitempty"`
	// Won says a tasks/cancel was answered with the cancelled task.
	Won     bool   `json:"won,omitempty"`
	Code    int    `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Result is tasks/result's result without its _meta; Related the task
	// id its _meta names.
	Result  json.RawMessage `json:"result,omitempty"`
	Related string          `json:"related,omitempty"`
	Text    string          `json:"text,omitempty"`
	// Broken says no answer came: what went wrong.
	Broken string `json:"broken,omitempty"`
}

// Task violation kinds.
const (
	VTaskStatusMoved        = "task_status_moved"
	VTaskCancelledCompleted = "task_cancelled_read_completed"
	VTaskResultMismatch     = "task_result_mismatch"
	VTaskCancelTerminal     = "task_cancel_terminal"
	VTaskLost               = "task_lost"
	VTaskEndedUnasked       = "task_ended_unasked"
	VTaskNotServed          = "task_not_served"
)

// Task statuses as clients read them.
const (
	tsWorking   = "working"
	tsCompleted = "completed"
	tsFailed    = "failed"
	tsCancelled = "cancelled"
	tsUnknown   = "unknown"
	tsAbsent    = "absent"
)

// taskStatusOf is the status a task's call record state reads as.
var taskStatusOf = map[string]string{stRunning: tsWorking, stCompleted: tsCompleted, stFailed: tsFailed, stCancelled: tsCancelled}

// CheckTasks returns every violation of the task promises in h: each
// task ends in exactly one terminal status, which never moves; a
// cancelled task never reads completed; tasks/result returns what the
// call would have returned; a tasks/cancel on a terminal task is -32602;
// no task is lost while its TTL runs, nor ended by its client's going.
func CheckTasks(h *History) []Violation {
	var vs []Violation
	ids := make([]string, 0, len(h.Server))
	for id, s := range h.Server {
		if s.Task {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		vs = append(vs, checkTaskRecord(h.Server[id])...)
	}
	for _, t := range h.Tasks {
		if t.TaskID != "" {
			vs = append(vs, checkClientTask(t, h.Server[t.TaskID])...)
		}
	}
	return vs
}

// checkTaskRecord checks what etcd held of a task: its result stored iff
// it completed, and its decision audited with its task id.
func checkTaskRecord(s *ServerCall) []Violation {
	var vs []Violation
	bad := func(kind, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Subject: "task " + s.CallID, Server: s, Detail: fmt.Sprintf(format, args...)})
	}
	final := s.Final()
	switch {
	case s.ResultStored && final.State == stCancelled:
		bad(VTaskCancelledCompleted, "the task was cancelled (%s), yet a completion stored its result", final.Initiator)
	case s.ResultStored && final.State != stCompleted:
		bad(VTaskStatusMoved, "the task ended %s, yet a completion stored its result", final.State)
	case final.State == stCompleted && !s.ResultStored && !final.Settled.IsZero() && final.Settled.Before(s.Requested.Add(s.TaskTTL)):
		bad(VTaskLost, "the task completed %v into its TTL of %v, but no result was stored", final.Settled.Sub(s.Requested), s.TaskTTL)
	}
	for _, a := range s.Audits {
		if a.TaskID != s.CallID {
			bad(VAuditMismatch, "audit record %s (%s) names task %q", a.Key, a.Outcome, a.TaskID)
		}
	}
	return vs
}

// checkClientTask checks what one client saw of a task against how etcd
// decided it.
func checkClientTask(t *ClientTask, s *ServerCall) []Violation {
	var vs []Violation
	bad := func(kind, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Subject: t.Ref + " (task " + t.TaskID + ")", Server: s, Detail: fmt.Sprintf(format, args...) + "\n  task history: " + t.String()})
	}
	if s == nil || !s.Task {
		bad(VTaskLost, "CreateTaskResult named the task, but etcd never held it as a task")
		return vs
	}
	final := s.Final()
	end, terminal := taskStatusOf[final.State], final.State != stRunning
	expires := t.CreatedAt.Add(t.TTL)
	won := 0
	for i, op := range t.Ops {
		what := fmt.Sprintf("%s #%d on gateway %d", op.Method, i, op.Gateway)
		switch op.Status {
		case "":
		case tsUnknown, tsAbsent:
			if op.At.Before(expires) {
				bad(VTaskLost, "%s answered %s %v before the task's TTL ran out", what, op.Status, expires.Sub(op.At))
			}
		case tsWorking:
			if terminal && !final.Seen.IsZero() && op.Sent.After(final.Seen) {
				bad(VTaskStatusMoved, "%s read working, sent %v after the task was seen %s", what, op.Sent.Sub(final.Seen), end)
			}
		default:
			switch {
			case op.Status == tsCompleted && final.State == stCancelled:
				bad(VTaskCancelledCompleted, "%s read completed; the task was cancelled (%s)", what, final.Initiator)
			case op.Status == tsFailed && op.Method == "tasks/result" && final.State == stCompleted && s.toolError():
				// the tool's own error result, as the call would have answered
			case op.Status != end:
				bad(VTaskStatusMoved, "%s read %s; the task ended %s", what, op.Status, final.State)
			}
		}
		if op.Won {
			won++
			switch {
			case won > 1:
				bad(VTaskCancelTerminal, "%s won too: a second tasks/cancel on a cancelled task, not -32602", what)
			case final.State != stCancelled || final.Initiator != "client":
				bad(VTaskCancelTerminal, "%s said it cancelled the task, which ended %s (%s)", what, final.State, final.Initiator)
			case !final.Seen.IsZero() && op.Sent.After(final.Seen):
				bad(VTaskCancelTerminal, "%s won, sent %v after the task was terminal", what, op.Sent.Sub(final.Seen))
			}
		}
		if op.Method == "tasks/result" && op.Status != "" && op.Status != tsUnknown {
			checkTaskResult(t, op, what, bad)
		}
	}
	checkTaskEnd(t, s, bad)
	if t.ServeOn >= 0 {
		checkServed(t, s, bad)
	}
	return vs
}

// checkTaskResult checks a tasks/result answer: the result the tool gives
// for its arguments (and, when the client made one, what a plain call
// returned), tagged with its task.
func checkTaskResult(t *ClientTask, op TaskOp, what string, bad func(string, string, ...any)) {
	if op.Status == tsCancelled {
		return // a JSON-RPC error, as the call would have had no result
	}
	if op.Related != t.TaskID {
		bad(VTaskResultMismatch, "%s: _meta names task %q", what, op.Related)
	}
	if op.Status != tsCompleted {
		return
	}
	if op.Text != t.Expected {
		bad(VTaskResultMismatch, "%s: result text %q, the tool returns %q", what, op.Text, t.Expected)
	}
	if len(t.Reference) > 0 && !sameJSON(op.Result, t.Reference) {
		bad(VTaskResultMismatch, "%s: result %s, a plain tools/call returned %s", what, op.Result, t.Reference)
	}
}

// checkTaskEnd checks that a task cancelled by its client was cancelled by
// a tasks/cancel this client sent before the task ended, and that no task
// ended with its client's going (its session closed, its gateway gone).
func checkTaskEnd(t *ClientTask, s *ServerCall, bad func(string, string, ...any)) {
	final := s.Final()
	if final.State != stCancelled {
		return
	}
	switch final.Initiator {
	case "disconnect":
		bad(VTaskEndedUnasked, "the task was cancelled as its caller went away (%s); tasks outlive their client's connection", final.Initiator)
	case "client":
		for _, op := range t.Ops {
			if op.Method == "tasks/cancel" && (final.Seen.IsZero() || op.Sent.Before(final.Seen)) {
				return
			}
		}
		bad(VTaskEndedUnasked, "the task was cancelled by its client, which sent no tasks/cancel before it ended")
	}
}

// checkServed checks a probe: after the gateway that created the task was
// killed, the other one answered tasks/result with the task's outcome. A
// task whose TTL ran out before it ended had no outcome to serve: there,
// the other gateway's answer that the task is gone serves (one given
// before the TTL ran out is task_lost, above). Seen in a soak: faults held
// CreateTask's reply 4 s of the task's 5 s TTL, and the gateway was killed
// before it began the task's run, which the janitor then failed.
func checkServed(t *ClientTask, s *ServerCall, bad func(string, string, ...any)) {
	final := s.Final()
	expires := t.CreatedAt.Add(t.TTL)
	noOutcome := final.State == stRunning || !final.Settled.Before(expires)
	for _, op := range t.Ops {
		if op.Method != "tasks/result" || op.Gateway != t.ServeOn || op.Status == "" {
			continue
		}
		if gone := op.Status == tsUnknown || op.Status == tsAbsent; !gone || noOutcome {
			return
		}
	}
	bad(VTaskNotServed, "gateway %d was killed after creating the task; gateway %d never answered tasks/result with its outcome", t.CreatedOn, t.ServeOn)
}

func (t *ClientTask) String() string {
	b, _ := json.Marshal(t)
	return string(b)
}

// sameJSON says whether a and b are the same JSON value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// taskSummary is what a run reports of its tasks.
type taskSummary struct {
	Created      int            `json:"created"`
	Final        map[string]int `json:"final"` // task records by final state
	Reads        int            `json:"reads"` // answers that stated a status
	CancelsWon   int            `json:"cancels_won"`
	CancelsAfter int            `json:"cancels_refused"`  // tasks/cancel answered -32602
	Results      int            `json:"results"`          // tasks/result answered with an outcome
	AsPlainCall  int            `json:"results_compared"` // results compared with a plain call's
	StoreErrors  int            `json:"store_errors"`     // answers -32603: the gateway could not reach the coordinators
	Probes       int            `json:"probes"`           // tasks whose creating gateway was killed
	ProbeFinal   map[string]int `json:"probe_final"`
}

func summarizeTasks(h *History) taskSummary {
	ts := taskSummary{Final: map[string]int{}, ProbeFinal: map[string]int{}}
	for _, s := range h.Server {
		if s.Task {
			ts.Final[s.Final().State]++
		}
	}
	for _, t := range h.Tasks {
		if t.TaskID == "" {
			continue
		}
		ts.Created++
		if t.ServeOn >= 0 {
			ts.Probes++
			if s := h.Server[t.TaskID]; s != nil {
				ts.ProbeFinal[s.Final().State]++
			}
		}
		for _, op := range t.Ops {
			if op.Status != "" {
				ts.Reads++
			}
			if op.Status == "" && op.Code == -32603 {
				ts.StoreErrors++
			}
			switch {
			case op.Won:
				ts.CancelsWon++
			case op.Method == "tasks/cancel" && op.Code == -32602:
				ts.CancelsAfter++
			case op.Method == "tasks/result" && op.Status != "" && op.Status != tsUnknown:
				ts.Results++
				if op.Status == tsCompleted && len(t.Reference) > 0 {
					ts.AsPlainCall++
				}
			}
		}
	}
	return ts
}

// taskPrincipals are the principals the task clients used: their calls
// are theirs, not the call workload's.
func taskPrincipals(h *History) map[string]bool {
	m := map[string]bool{}
	for _, t := range h.Tasks {
		m[t.Principal] = true
	}
	return m
}
