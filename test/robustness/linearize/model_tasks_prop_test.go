package linearize

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"pgregory.net/rapid"
)

// refTask is a task as the coordinator's code decides it, written apart
// from the model, imperatively: the reference the property holds the
// model to.
type refTask struct {
	state, initiator, reason string
	inputs, used             []string
}

func (r *refTask) shown() Output {
	o := Output{State: r.state}
	switch r.state {
	case Running:
		o.State = Working
		if len(r.inputs) > 0 {
			o.State, o.Inputs = InputRequired, keySet(r.inputs)
		}
	case Failed, Cancelled:
		o.Initiator = r.initiator
	}
	return o
}

// settle is a decision by the call's owner (Complete, Fail, Cancel by
// reference): it wins on a running task, and again when it finds its own
// decision made.
func (r *refTask) settle(state, initiator string) string {
	switch {
	case r.state == Running:
		r.state, r.initiator, r.reason = state, initiator, ""
	case r.state == state && r.initiator == initiator && r.reason == "":
	default:
		return map[string]string{Completed: RAlreadyCompleted, Failed: RAlreadyFailed, Cancelled: RAlreadyCancelled}[r.state]
	}
	if state == Cancelled {
		return RCancelled
	}
	return RWon
}

var refKeys = []string{"k1", "k2", "k3"}

// step draws one operation on the task, applies it to r and returns it
// with the reply the coordinator gives.
func (r *refTask) step(t *rapid.T) (Input, Output) {
	in := Input{Key: TaskKey(t1), ID: t1, Principal: "alice"}
	switch in.Op = rapid.SampledFrom([]string{OpGetTask, OpWaitTask, OpListTask, OpCancelTask, OpComplete, OpFail,
		OpCancelRef, OpGetID, OpSetInput, OpUpdateTask, "stranger"}).Draw(t, "op"); in.Op {
	case "stranger":
		in.Op, in.Principal = OpGetTask, "mallory"
		return in, Output{Result: RNotFound}
	case OpGetTask, OpListTask:
		return in, r.shown()
	case OpWaitTask:
		if r.state == Running {
			in.Op = OpGetTask
		}
		return in, r.shown()
	case OpCancelTask:
		in.Initiator, in.Reason = TaskInitiator, TaskReason
		if r.state != Running {
			o := r.shown()
			o.Result = RNotCancelled
			return in, o
		}
		r.state, r.initiator, r.reason = Cancelled, TaskInitiator, TaskReason
		o := r.shown()
		o.Result = RCancelled
		return in, o
	case OpComplete:
		in.Principal = ""
		return in, Output{Result: r.settle(Completed, "")}
	case OpFail:
		in.Principal, in.Initiator = "", rapid.SampledFrom([]string{WorkerLost, "tool"}).Draw(t, "initiator")
		return in, Output{Result: r.settle(Failed, in.Initiator)}
	case OpCancelRef:
		in.Principal, in.Initiator = "", "timeout"
		return in, Output{Result: r.settle(Cancelled, "timeout")}
	case OpGetID:
		in.Principal = ""
		return in, Output{ID: t1, State: r.state}
	case OpSetInput:
		in.Principal = ""
		return in, r.setInput(t, &in)
	}
	in.Keys = keySet(rapid.SliceOfDistinct(rapid.SampledFrom(refKeys), rapid.ID).Draw(t, "answer"))
	return in, r.update(in.Keys)
}

func (r *refTask) setInput(t *rapid.T, in *Input) Output {
	ask := rapid.SliceOfDistinct(rapid.SampledFrom(refKeys), rapid.ID).Draw(t, "ask")
	withdraw := rapid.SliceOfDistinct(rapid.SampledFrom(refKeys), rapid.ID).Draw(t, "withdraw")
	in.Keys, in.Withdraw = keySet(ask), keySet(withdraw)
	if r.state != Running {
		return Output{Result: RNotFound}
	}
	inputs, used := slices.Clone(r.inputs), slices.Clone(r.used)
	for _, k := range withdraw {
		if i := slices.Index(inputs, k); i >= 0 {
			inputs, used = slices.Delete(inputs, i, i+1), append(used, k)
		}
	}
	for _, k := range ask {
		if slices.Contains(inputs, k) || slices.Contains(used, k) {
			return Output{Result: RRefused}
		}
		inputs = append(inputs, k)
	}
	r.inputs, r.used = inputs, used
	return Output{}
}

func (r *refTask) update(answer string) Output {
	var taken []string
	if r.state == Running {
		r.inputs = slices.DeleteFunc(r.inputs, func(k string) bool {
			if has(answer, k) {
				taken = append(taken, k)
				r.used = append(r.used, k)
				return true
			}
			return false
		})
	}
	o := r.shown()
	o.Accepted = keySet(taken)
	return o
}

// mutations are the outputs a reply could have had instead, among those
// the model tells apart for the operation.
func mutations(in Input, out Output) []Output {
	var alts []Output
	vary := func(set func(*Output, string), values ...string) {
		for _, v := range values {
			o := out
			set(&o, v)
			if o != out {
				alts = append(alts, o)
			}
		}
	}
	results := func(values ...string) { vary(func(o *Output, v string) { o.Result = v }, values...) }
	switch in.Op {
	case OpComplete, OpFail, OpCancelRef:
		results(RWon, RCancelled, RAlreadyCompleted, RAlreadyCancelled, RAlreadyFailed, RNotFound)
	case OpGetID:
		vary(func(o *Output, v string) { o.State = v }, Running, Completed, Cancelled, Failed)
	case OpSetInput:
		results("", RRefused, RNotFound)
	default:
		results("", RNotFound, RCancelled, RNotCancelled)
		if out.Result == RNotFound {
			break // nothing else of a missing task's reply is read
		}
		vary(func(o *Output, v string) { o.State = v }, Working, InputRequired, Completed, Failed, Cancelled)
		vary(func(o *Output, v string) { o.Initiator = v }, "", TaskInitiator, "timeout", WorkerLost, "tool")
		vary(func(o *Output, v string) { o.Inputs = v }, "", "k1", "k1,k2")
		if in.Op == OpUpdateTask {
			vary(func(o *Output, v string) { o.Accepted = v }, "", "k1", "k2,k3")
		}
	}
	return alts
}

// TestModelTaskProperty: a task's every sequential history, with the
// replies the reference gives, is linearizable; the same history with
// any one reply changed to any other the model tells apart is not.
func TestModelTaskProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := []porcupine.Operation{createTask(0, 1)}
		r := &refTask{state: Running}
		for i, n := 0, rapid.IntRange(1, 12).Draw(t, "steps"); i < n; i++ {
			in, out := r.step(t)
			h = append(h, op(i%3, int64(2*i+2), int64(2*i+3), in, out))
		}
		if res, _ := Check(Options{}, h, 10*time.Second, ""); res.Result != porcupine.Ok {
			t.Fatalf("the reference's history: %v\n%s", res, describe(h))
		}
		for i := 1; i < len(h); i++ {
			for _, alt := range mutations(h[i].Input.(Input), h[i].Output.(Output)) {
				bad := slices.Clone(h)
				bad[i].Output = alt
				if res, _ := Check(Options{}, bad, 10*time.Second, ""); res.Result != porcupine.Illegal {
					t.Fatalf("operation %d answered %s: %v\n%s", i, describeOperation(bad[i].Input, alt), res, describe(bad))
				}
			}
		}
	})
}

func describe(h []porcupine.Operation) string {
	var s string
	for _, o := range h {
		s += fmt.Sprintf("  %s\n", describeOperation(o.Input, o.Output))
	}
	return s
}
