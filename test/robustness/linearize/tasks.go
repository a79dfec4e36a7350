package linearize

import (
	"slices"
	"strings"
)

// The model of an MCP task, as the coordinator's task RPCs (coordinator
// tasks*.go) decide it. A task is a call record with a task: its id is
// the call's id, and it is a partition of its own (TaskKey), holding at
// most that one call, created by CreateTask. Its status is its call's
// state (working while it runs, input_required while it runs and waits
// on input requests); the call's own operations (Complete, Fail, Cancel
// by reference, GetCall by id) step it as they step any call.
//
// What each task RPC returns, per the code:
//
//   - CreateTask places a new working task of its principal; it never
//     meets an earlier call or task of its key (no index, no running-set
//     entry, no duplicate check). Refused (InvalidArgument: a bad request
//     or a tool that does not run as a task; NotFound: no worker offers
//     it; ResourceExhausted: no capacity, or the principal's task limit;
//     FailedPrecondition: the session closed), it wrote nothing.
//   - GetTask, WaitTask, CancelTask and UpdateTask read the task entry
//     of the asking principal and the call record in one linearizable
//     read: another principal's task, an id that is no call id, a call
//     that is not a task, or a task whose TTL passed (or whose record
//     expired) is NotFound (UNKNOWN_TASK), and nothing changes. GetTask
//     returns the status, the initiator of a failed or cancelled task,
//     and the input requests of an input_required one; WaitTask the same,
//     once the task is terminal.
//   - CancelTask on a running task is the client's cancel (initiator
//     client, reason as given, else "tasks/cancel"; not the owner's, so
//     it never wins again), guarded by the record's revision as read (a
//     record changed meanwhile is read again and decided again): cancelled
//     true, the task cancelled. On a terminal task, even one it cancelled
//     itself, cancelled false and the task as it ended (on a completed or
//     failed one, the first such writes the one cancel_lost audit record).
//   - SetTaskInput (the worker's, by call reference) on a running task
//     withdraws the named requests that are outstanding (their keys are
//     used), then asks the new ones: OK, unless a key asked is
//     outstanding or was used (InvalidArgument, nothing written); on a
//     terminal task, or a call whose record is gone, NotFound
//     (UNKNOWN_CALL); on a call that is no task, InvalidArgument; with a
//     wrong fence or worker, FailedPrecondition. The task is
//     input_required while any request is outstanding. (The model takes
//     requests to be well formed and within the bounds on what a task
//     may wait on, as the workloads' are.)
//   - UpdateTask on a running task takes the answered requests that are
//     outstanding (their keys are used) and returns them, with the task
//     after; on a terminal task, or answering nothing outstanding, it
//     takes nothing and returns the task as it is. Answers that are not
//     JSON are refused (InvalidArgument) before anything is read.
//   - ListTasks is checked per task (the recorder projects it): a task
//     listed reads as GetTask reads it; a task left out of a listing of
//     the principal's every task is one not yet created, or expired.
//   - A scope's CancelScope never cancels a task of the scope.
//
// With Options.Retention, a task's entry may expire at any moment, in
// any status (its TTL passes whether or not its call has ended): found
// missing once, the task is missing from then on, while its call record
// lives on. The task's operations that read the entry and then write
// (CancelTask, UpdateTask) are checked, when their outcome is known, as if
// atomic at the read; that is exact where no other observation of the
// same task overlaps them, as in the robustness operator's single task
// loop. One of unknown outcome may take effect after its task was seen
// missing (reachable).

// Task operation kinds.
const (
	OpCreateTask = "create_task"
	OpGetTask    = "get_task"
	OpWaitTask   = "wait_task"
	OpListTask   = "list_task" // ListTasks, projected on one task
	OpCancelTask = "cancel_task"
	OpSetInput   = "set_task_input" // SetTaskInput of call ID
	OpUpdateTask = "update_task"
)

// Task statuses that are not call states.
const (
	Working       = "working"
	InputRequired = "input_required"
)

// RNotCancelled is CancelTask's cancelled false: the task was terminal.
const RNotCancelled = "NOT_CANCELLED"

// TaskInitiator and TaskReason are what a CancelTask decides with.
const (
	TaskInitiator = "client"
	TaskReason    = "tasks/cancel"
)

// TaskKey is the partition of task id.
func TaskKey(id string) string { return "task:" + id }

// IsTaskKey says a partition is a task's.
func IsTaskKey(k string) bool { return strings.HasPrefix(k, "task:") }

// taskOp says an operation is a task RPC (the call's own operations on a
// task's call are not).
func taskOp(op string) bool {
	switch op {
	case OpCreateTask, OpGetTask, OpWaitTask, OpListTask, OpCancelTask, OpSetInput, OpUpdateTask:
		return true
	}
	return false
}

// pureRead says an operation changes nothing: one whose outcome is not
// known tells nothing, and is left out of the history.
func pureRead(op string) bool {
	return op == OpGetTask || op == OpWaitTask || op == OpListTask || op == OpGetKey || op == OpGetID
}

// keySet is a set of input request keys, sorted and comma-separated, so
// that a call stays comparable. Keys never hold commas (the workloads'
// own).
func keySet(keys []string) string {
	k := slices.Clone(keys)
	slices.Sort(k)
	return strings.Join(slices.Compact(k), ",")
}

func members(set string) []string {
	if set == "" {
		return nil
	}
	return strings.Split(set, ",")
}

func has(set, key string) bool { return slices.Contains(members(set), key) }

// stepTask returns the states s may move to by a task operation with
// this output: none if the output is impossible in s.
func stepTask(s state, in Input, out Output, o Options) []state {
	if out.Unknown {
		return append(taskEffects(s, in), s)
	}
	if n, ok := applyTask(s, in, out, o); ok {
		return []state{n}
	}
	return nil
}

// taskEffects lists the states a task operation of unknown outcome may
// leave.
func taskEffects(s state, in Input) []state {
	switch in.Op {
	case OpCreateTask:
		if len(s) == 0 {
			return []state{s.plus(call{State: Running, Task: true, Principal: in.Principal})}
		}
	case OpSetInput:
		if i := s.find(in.ID); i >= 0 && s[i].Task && s[i].State == Running {
			if n, ok := asked(s[i], in); ok {
				return []state{s.with(i, n)}
			}
		}
	case OpCancelTask:
		if c, ok := reachable(s, in); ok && c.State == Running {
			return []state{s.with(len(s)-1, decided(c, Cancelled, in.Initiator, in.Reason))}
		}
	case OpUpdateTask:
		if c, ok := reachable(s, in); ok {
			if n, taken := answered(c, in.Keys); taken != "" {
				return []state{s.with(len(s)-1, n)}
			}
		}
	}
	return nil
}

// reached returns the task a client's operation reaches: the partition's
// task, if it is the asking principal's and has not expired.
func reached(s state, in Input) (call, bool) {
	c, ok := reachable(s, in)
	if !ok || c.TaskGone {
		return call{}, false
	}
	return c, true
}

// reachable is reached, expired or not: an operation of unknown outcome
// may have read the task before it expired and written after, however
// long after (its replica paused between the two), so its effect may
// come after the task was seen missing.
func reachable(s state, in Input) (call, bool) {
	c, ok := s.latest()
	if !ok || !c.Task || c.Principal != in.Principal || c.Gone {
		return call{}, false
	}
	return c, true
}

// applyTask steps s by a task operation of known output, if that output
// is possible in s.
func applyTask(s state, in Input, out Output, o Options) (state, bool) {
	switch in.Op {
	case OpCreateTask:
		if out.Result == RRefused {
			return s, true
		}
		return s.plus(call{ID: out.ID, State: Running, Task: true, Principal: in.Principal}), len(s) == 0 && out.Result == "" && out.ID != ""
	case OpSetInput:
		return applySetInput(s, in, out)
	case OpUpdateTask:
		if out.Result == RRefused {
			return s, true // answers that are not JSON: refused before any read
		}
	}
	c, ok := reached(s, in)
	switch {
	case !ok:
		return s, out.Result == RNotFound
	case out.Result == RNotFound:
		// The task's TTL passed (or its record expired): missing from
		// now on.
		c.TaskGone = true
		return s.with(len(s)-1, c), o.Retention
	}
	switch in.Op {
	case OpGetTask, OpListTask:
		return s, out.Result == "" && shows(c, out)
	case OpWaitTask:
		return s, out.Result == "" && c.State != Running && shows(c, out)
	case OpCancelTask:
		if c.State != Running {
			return s, out.Result == RNotCancelled && shows(c, out)
		}
		n := decided(c, Cancelled, in.Initiator, in.Reason)
		return s.with(len(s)-1, n), out.Result == RCancelled && shows(n, out)
	case OpUpdateTask:
		n, taken := answered(c, in.Keys)
		return s.with(len(s)-1, n), out.Result == "" && out.Accepted == taken && shows(n, out)
	}
	return s, false
}

// applySetInput steps s by the worker's SetTaskInput of call in.ID.
func applySetInput(s state, in Input, out Output) (state, bool) {
	i := s.find(in.ID)
	switch {
	case i < 0 || s[i].Gone:
		return s, out.Result == RNotFound
	case !s[i].Task:
		return s, out.Result == RRefused // not a task
	case s[i].State != Running:
		return s, out.Result == RNotFound // "the task is <state>"
	}
	n, ok := asked(s[i], in)
	switch out.Result {
	case "":
		return s.with(i, n), ok
	case RRefused:
		return s, !ok
	}
	return s, false
}

// asked is c after a SetTaskInput: in.Withdraw's outstanding requests
// withdrawn, then in.Keys asked; ok is false, and c unchanged, if a key
// asked is outstanding or was used.
func asked(c call, in Input) (call, bool) {
	inputs, used := members(c.Inputs), members(c.Used)
	for _, k := range members(in.Withdraw) {
		if i := slices.Index(inputs, k); i >= 0 {
			inputs = slices.Delete(inputs, i, i+1)
			used = append(used, k)
		}
	}
	for _, k := range members(in.Keys) {
		if slices.Contains(inputs, k) || slices.Contains(used, k) {
			return c, false
		}
		inputs = append(inputs, k)
	}
	c.Inputs, c.Used = keySet(inputs), keySet(used)
	return c, true
}

// answered is c after an UpdateTask answering keys, and the requests it
// took: the outstanding ones answered, while c runs.
func answered(c call, keys string) (call, string) {
	if c.State != Running {
		return c, ""
	}
	var inputs, taken []string
	for _, k := range members(c.Inputs) {
		if has(keys, k) {
			taken = append(taken, k)
		} else {
			inputs = append(inputs, k)
		}
	}
	c.Inputs, c.Used = keySet(inputs), keySet(append(members(c.Used), taken...))
	return c, keySet(taken)
}

// taskStatus is a task's status as the API names it.
func taskStatus(c call) string {
	switch {
	case c.State != Running:
		return c.State
	case c.Inputs != "":
		return InputRequired
	}
	return Working
}

// shows says a reply shows task c as it is: its status, the initiator of
// a failed or cancelled task, the requests an input_required one waits
// on.
func shows(c call, out Output) bool {
	initiator, inputs := "", ""
	switch c.State {
	case Failed, Cancelled:
		initiator = c.Initiator
	case Running:
		inputs = c.Inputs
	}
	return out.State == taskStatus(c) && out.Initiator == initiator && out.Inputs == inputs
}
