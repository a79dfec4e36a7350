// Package linearize checks that the coordinator's decisions are
// linearizable: it records coordinator operations as clients see them
// (invocation and response on one clock, from gRPC client interceptors)
// and checks the history with porcupine against a model of one call
// key's state machine. It is test-only: the robustness harness and the
// coordinator's own tests use it; nothing the binary runs imports it.
//
// The model, per call key (scope and request id): the key's calls in
// order, each running, completed, cancelled or failed, the latest the
// only one that may run. Begin places a call when the key is free or its
// latest call settled; a retry Begin places one only after the named
// latest call failed with its worker lost and was no retry itself. A
// cancel (by key: the latest call; by reference: the named one), Complete
// and Fail move a running call to their state and win, or report what
// won; a decision by the call's owner (by reference, Complete, Fail) that
// finds the same decision made is its own earlier attempt, whose reply was
// lost, and wins again. GetCall reads the latest call (by key) or the named one. A scope's
// CancelScope is checked per key: it cancelled the key's running call, or
// found none running. Start (start.go) is a named Begin whose call id is
// known before it commits; a decision naming that call by placement
// creates its record, already settled, if the Begin has not, and the
// Begin then reports the call settled and writes nothing.
//
// MCP tasks (tasks.go) are partitions of their own, one per task id: a
// task's call is in no key's index, so it is no key's latest call, and
// the key's operations and the task's never meet.
package linearize

import (
	"slices"

	"github.com/anishathalye/porcupine"
)

// Operation kinds.
const (
	OpBegin       = "begin"
	OpRetry       = "retry"         // Begin with retry_of = ID
	OpCancelKey   = "cancel_key"    // Cancel naming the key
	OpCancelRef   = "cancel_ref"    // Cancel naming call ID
	OpComplete    = "complete"      // Complete of call ID
	OpFail        = "fail"          // Fail of call ID
	OpGetKey      = "get_key"       // GetCall naming the key
	OpGetID       = "get_id"        // GetCall naming call ID
	OpCancelScope = "cancel_scope"  // CancelScope, projected on one key
	OpAbandon     = "abandon_begin" // AbandonBegin of the Begin named BeginID (abandon.go)
	OpStart       = "start"         // Start, a named Begin beside its work (start.go)
)

// Call states, as the model and GetCall name them.
const (
	Running   = "running"
	Completed = "completed"
	Cancelled = "cancelled"
	Failed    = "failed"
)

// Results of a decision, as the API names them (CancelResult and
// SettleResult, without their prefixes), and of a lookup.
const (
	RCancelled        = "CANCELLED"
	RWon              = "WON"
	RAlreadyCompleted = "ALREADY_COMPLETED"
	RAlreadyCancelled = "ALREADY_CANCELLED"
	RAlreadyFailed    = "ALREADY_FAILED"
	RUnknown          = "UNKNOWN"       // Cancel: no such call
	RNotFound         = "NOT_FOUND"     // GetCall: no such call
	RDuplicate        = "DUPLICATE"     // Begin: the key's call still runs
	RNotRetryable     = "NOT_RETRYABLE" // retry Begin refused
	RRefused          = "REFUSED"       // Begin refused for a reason the key's state does not decide (no worker, no capacity)
	RAbandoned        = "ABANDONED"     // Begin: its caller abandoned it first
	RNotBegun         = "NOT_BEGUN"     // AbandonBegin: the Begin had not committed, and never will
)

// WorkerLost is the initiator of a failure because the worker was lost.
const WorkerLost = "worker_lost"

// Input is one operation as invoked.
type Input struct {
	Op        string
	Key       string // scope + "|" + request id, or TaskKey(task id): the partition
	ID        string // the call named (ref ops, get_id, retry_of), or the task
	Initiator string // cancels and Fail
	Reason    string // cancels and Fail: the coordinator's madeBy compares it too
	// Principal is who creates or asks for a task (task ops).
	Principal string `json:",omitempty"`
	// Keys are the input requests a SetTaskInput asks or an UpdateTask
	// answers, Withdraw those a SetTaskInput withdraws (sets, see keySet).
	Keys     string `json:",omitempty"`
	Withdraw string `json:",omitempty"`
	// BeginID names a Begin (or retry) for AbandonBegin, and the Begin
	// an AbandonBegin abandons.
	BeginID string `json:",omitempty"`
	// Placed says a decision names its call by placement (fence 0), and
	// may create its record (start.go); BeginID is then its Start's.
	Placed bool `json:",omitempty"`
}

// Output is what the client got back.
type Output struct {
	// Unknown says the operation's outcome is not known (it timed out, or
	// its connection was lost): it may or may not have taken effect.
	Unknown bool
	Result  string // one of the R* constants
	ID      string // begin/retry/create_task: the new call; gets and cancel_scope: the call found
	State   string // gets: the call's state; task ops: the task's status
	// Task ops: the task's initiator (failed or cancelled), the input
	// requests it waits on (input_required), and the answers an
	// UpdateTask took (sets, see keySet).
	Initiator string `json:",omitempty"`
	Inputs    string `json:",omitempty"`
	Accepted  string `json:",omitempty"`
}

// call is one call under a key, in the model.
type call struct {
	ID        string // "" until learned, for a Begin whose outcome is unknown
	State     string
	Initiator string
	Reason    string // the deciding operation's; janitorReason for the janitor's
	Retry     bool
	BeginID   string // the Begin that placed it, if named
	Created   bool   // a decision by placement created its record, settled (start.go)
	// Gone says retention removed the settled call's record, IndexGone
	// its key's index entry (written at Begin, it expires first): found
	// missing, by id or by key, it may not be found so again.
	Gone, IndexGone bool
	// Task says the call is a task's (tasks.go), of Principal; Inputs
	// are the input requests it waits on, Used the keys answered or
	// withdrawn (sets, see keySet); TaskGone says its task entry expired
	// (its TTL passed): found missing, the task is not found again.
	Task         bool
	Principal    string
	Inputs, Used string
	TaskGone     bool
}

// byKey says the operation finds its call through the key's index.
func byKey(op string) bool { return op == OpCancelKey || op == OpGetKey }

// state is one key's calls, oldest first. Steps never modify a state.
type state []call

func (s state) latest() (call, bool) {
	if len(s) == 0 {
		return call{}, false
	}
	return s[len(s)-1], true
}

// find returns the index of the call named id, adopting the latest call
// of unknown id if none is named so.
func (s state) find(id string) int {
	if i := slices.IndexFunc(s, func(c call) bool { return c.ID == id }); i >= 0 {
		return i
	}
	if n := len(s); n > 0 && s[n-1].ID == "" {
		return n - 1
	}
	return -1
}

func (s state) with(i int, c call) state {
	out := slices.Clone(s)
	out[i] = c
	return out
}

func (s state) plus(c call) state { return append(slices.Clone(s), c) }

// Options shape the model.
type Options struct {
	// Janitor allows calls to fail at any moment with no recorded
	// operation (the janitor failing a lost worker's calls, or a call past
	// its deadline): on for histories taken beside a real cluster's
	// workers and their faults, off where nothing but the recorded
	// clients decides.
	Janitor bool
	// Retention allows a settled call to be missing (its records expired);
	// once found missing it stays missing.
	Retention bool
}

// Model returns the porcupine model, partitioned by call key.
func Model(o Options) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []interface{} { return []interface{}{keyState{}} },
		Step: func(st, in, out interface{}) []interface{} {
			ks, i, o2 := st.(keyState), in.(Input), out.(Output)
			s := ks.calls
			pre := []state{s}
			if o.Janitor {
				pre = append(pre, janitor(s, WorkerLost), janitor(s, "timeout"))
			}
			var next []interface{}
			for _, p := range pre {
				if i.Op == OpStart || i.Placed {
					for _, n := range stepPlacedOrStart(keyState{p, ks.abandoned}, i, o2, o) {
						next = append(next, n)
					}
					continue
				}
				if i.Op == OpAbandon || i.BeginID != "" || o2.Result == RAbandoned {
					for _, n := range stepAbandoning(keyState{p, ks.abandoned}, i, o2, o) {
						next = append(next, n)
					}
					continue
				}
				if taskOp(i.Op) {
					for _, n := range stepTask(p, i, o2, o) {
						next = append(next, keyState{n, ks.abandoned})
					}
					continue
				}
				for _, n := range stepCall(p, i, o2, o) {
					next = append(next, keyState{n, ks.abandoned})
				}
			}
			return next
		},
		Equal: func(a, b interface{}) bool {
			x, y := a.(keyState), b.(keyState)
			return x.abandoned == y.abandoned && slices.Equal(x.calls, y.calls)
		},
		DescribeOperation: describeOperation,
		DescribeState:     describeState,
	}
	return nm.ToModel()
}

// stepCall returns the states s may move to by a call's operation,
// retention's forgetting included.
func stepCall(s state, in Input, out Output, o Options) []state {
	if o.Retention && missing(in, out) {
		if n, ok := forget(s, in); ok {
			return []state{n}
		}
		return nil
	}
	return step(s, in, out, o)
}

// missing says an operation found no call.
func missing(in Input, out Output) bool {
	return !out.Unknown && (out.Result == RNotFound || out.Result == RUnknown)
}

// forget explains a call found missing by retention: the call named (or
// the key's latest) settled, and is gone from now on. A key with no call
// at all is missing without retention.
func forget(s state, in Input) (state, bool) {
	i := len(s) - 1
	if !byKey(in.Op) {
		i = s.find(in.ID)
	}
	if i < 0 {
		return s, true
	}
	c := s[i]
	if c.State == Running {
		return s, false
	}
	c.IndexGone = true
	if !byKey(in.Op) {
		c.Gone = true
	}
	return s.with(i, c), true
}

// found says a call the operation found was still there to find.
func found(c call, op string) bool {
	if byKey(op) {
		return !c.IndexGone
	}
	return !c.Gone
}

// janitorReason stands for the janitor's reasons, which no recorded
// operation gives: an owner's Fail that finds the janitor's failure did
// not make it, and loses.
const janitorReason = "\x00janitor"

// janitor fails the key's running call, if any.
func janitor(s state, initiator string) state {
	if c, ok := s.latest(); ok && c.State == Running {
		return s.with(len(s)-1, decided(c, Failed, initiator, janitorReason))
	}
	return s
}

// step returns the states s may move to by an operation with this
// output: none if the output is impossible in s.
func step(s state, in Input, out Output, o Options) []state {
	if out.Unknown {
		// It took effect (with some output) or it did not.
		return append(effects(s, in), s)
	}
	if n, ok := apply(s, in, out, o); ok {
		return []state{n}
	}
	return nil
}

// effects lists the states an operation of unknown outcome may leave.
func effects(s state, in Input) []state {
	var out []state
	switch in.Op {
	case OpBegin, OpRetry:
		if ok, retry := placeable(s, in); ok {
			out = append(out, s.plus(call{State: Running, Retry: retry, BeginID: in.BeginID}))
		}
	case OpCancelKey, OpCancelScope:
		if c, ok := s.latest(); ok && c.State == Running && !c.Task {
			out = append(out, s.with(len(s)-1, decided(c, Cancelled, in.Initiator, in.Reason)))
		}
	case OpCancelRef, OpComplete, OpFail:
		if i := s.find(in.ID); i >= 0 && s[i].State == Running {
			out = append(out, s.with(i, decided(s[i], target(in.Op), in.Initiator, in.Reason)))
		}
	}
	return out
}

func decided(c call, st, initiator, reason string) call {
	c.State, c.Initiator, c.Reason = st, initiator, reason
	return c
}

func target(op string) string {
	switch op {
	case OpComplete:
		return Completed
	case OpFail:
		return Failed
	}
	return Cancelled
}

// placeable says whether a Begin (or retry) may place a call in s.
func placeable(s state, in Input) (ok, retry bool) {
	c, any := s.latest()
	if in.Op == OpBegin {
		return !any || c.State != Running, false
	}
	return any && !c.Gone && c.ID == in.ID && c.State == Failed && c.Initiator == WorkerLost && !c.Retry, true
}

// lost is what a decision reports when the call had already settled.
var lost = map[string]map[string]string{
	"cancel": {Completed: RAlreadyCompleted, Cancelled: RAlreadyCancelled, Failed: RAlreadyFailed, Running: RCancelled},
	"settle": {Completed: RAlreadyCompleted, Cancelled: RAlreadyCancelled, Failed: RAlreadyFailed, Running: RWon},
}

// apply steps s by an operation of known output, if that output is
// possible in s.
func apply(s state, in Input, out Output, o Options) (state, bool) {
	switch in.Op {
	case OpBegin, OpRetry:
		return applyBegin(s, in, out, o)
	case OpCancelKey:
		c, ok := s.latest()
		if !ok {
			return s, out.Result == RUnknown
		}
		return decide(s, len(s)-1, c, "cancel", in, out)
	case OpCancelRef, OpComplete, OpFail:
		i := s.find(in.ID)
		if i < 0 {
			return s, out.Result == RUnknown || out.Result == RNotFound
		}
		kind := "settle"
		if in.Op == OpCancelRef {
			kind = "cancel"
		}
		return decide(s, i, s[i], kind, in, out)
	case OpGetKey, OpGetID:
		return read(s, in, out)
	case OpCancelScope:
		c, ok := s.latest()
		if ok && c.Task {
			return s, out.ID == "" // a task is in no scope's running set
		}
		running := ok && c.State == Running
		if out.ID == "" {
			return s, !running
		}
		if !running || (c.ID != "" && c.ID != out.ID) {
			return s, false
		}
		c.ID = out.ID
		return s.with(len(s)-1, decided(c, Cancelled, in.Initiator, in.Reason)), true
	}
	return s, false
}

func applyBegin(s state, in Input, out Output, o Options) (state, bool) {
	ok, retry := placeable(s, in)
	switch out.Result {
	case "":
		return s.plus(call{ID: out.ID, State: Running, Retry: retry, BeginID: in.BeginID}), ok && out.ID != ""
	case RDuplicate:
		c, any := s.latest()
		return s, in.Op == OpBegin && any && c.State == Running
	case RNotRetryable:
		// With retention on (a real cluster's timings), a call past its
		// deadline, or expired, is not retried either.
		return s, in.Op == OpRetry && (!ok || o.Retention)
	case RRefused:
		return s, true
	}
	return s, false
}

// decide steps the call at i by a cancel or a settle: it wins on a running
// call and reports the winner on a settled one.
func decide(s state, i int, c call, kind string, in Input, out Output) (state, bool) {
	want := lost[kind][c.State]
	if in.Op != OpCancelKey && c.State == target(in.Op) && c.Initiator == in.Initiator && c.Reason == in.Reason {
		// The owner's decision found made already, by the same initiator
		// for the same reason, is its own earlier attempt (whose reply
		// was lost): it is won again.
		want = lost[kind][Running]
	}
	if !found(c, in.Op) || out.Result != want {
		return s, false
	}
	if c.State != Running {
		return s, true
	}
	return s.with(i, decided(c, target(in.Op), in.Initiator, in.Reason)), true
}

func read(s state, in Input, out Output) (state, bool) {
	i := len(s) - 1
	if in.Op == OpGetID {
		i = s.find(in.ID)
	}
	if i < 0 {
		return s, out.Result == RNotFound
	}
	c := s[i]
	if !found(c, in.Op) || out.Result == RNotFound || c.State != out.State || (c.ID != "" && out.ID != "" && c.ID != out.ID) {
		return s, false
	}
	if c.ID == "" {
		c.ID = out.ID // learned: the Begin whose reply was lost placed it
		return s.with(i, c), true
	}
	return s, true
}
