package gateway

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// recSink records what the gate lets out, in order.
type recSink struct {
	mu   sync.Mutex
	msgs []sent
}

type sent struct {
	response bool // a response (result or error) rather than a notification
	isError  bool // a tool error result
}

func (r *recSink) send(msg []byte) bool {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	json.Unmarshal(msg, &m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, sent{response: m.ID != nil, isError: m.Result.IsError})
	return true
}

func (r *recSink) sendLatest(_ string, msg []byte) bool { return r.send(msg) }

func (r *recSink) streams() bool { return true }

func (r *recSink) flush() {}

func (r *recSink) snapshot() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.msgs...)
}

// gateOp is one thing that can happen to a call's gate: its worker
// answers, progress or a log arrives, the gateway asks to cancel, the
// call begins, that ask fails, a decision comes back naming who won, the
// client leaves, or the call is placed again after its worker was lost.
type gateOp struct {
	name string
	who  pb.Initiator
}

var (
	gateOpNames = []string{"result", "progress", "log", "ask cancel", "begin", "cancel undecided", "replace", "decided", "client left"}
	deciders    = []pb.Initiator{
		pb.Initiator_INITIATOR_CLIENT, pb.Initiator_INITIATOR_UNSPECIFIED, pb.Initiator_INITIATOR_TIMEOUT,
		pb.Initiator_INITIATOR_OPERATOR, pb.Initiator_INITIATOR_SHUTDOWN, pb.Initiator_INITIATOR_DISCONNECT,
		pb.Initiator_INITIATOR_WORKER_LOST,
	}
	// gateOpGen draws an operation, each kind as likely as another (so a
	// decision, which closes the gate, does not crowd out the rest).
	gateOpGen = rapid.Custom(func(t *rapid.T) gateOp {
		op := gateOp{name: rapid.SampledFrom(gateOpNames).Draw(t, "name")}
		if op.name == "decided" {
			op.who = rapid.SampledFrom(deciders).Draw(t, "who")
		}
		return op
	})
)

var (
	resultMsg = []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	errorMsg  = []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}`)
	notifyMsg = []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`)
)

// gateDriver drives a gate alone, as a call does, and says what each
// operation returned.
type gateDriver struct {
	g    gate
	out  *recSink
	left atomic.Bool
}

// apply runs op on the gate. It returns the cancel order askCancel or
// begin handed back for sending (nil for none) and whether replace
// readied the call to be placed again.
func (d *gateDriver) apply(op gateOp) (order *cancelOrder, replaced bool) {
	switch op.name {
	case "result":
		d.g.respond(d.out, resultMsg)
	case "progress":
		d.g.relay(func() bool { return d.out.sendLatest("progress/tok", notifyMsg) })
	case "log":
		d.g.relay(func() bool { return d.out.send(notifyMsg) })
	case "ask cancel":
		order, _ = d.g.askCancel(pb.Initiator_INITIATOR_CLIENT, "changed my mind")
	case "begin":
		order = d.g.begin()
	case "cancel undecided":
		d.g.undecided()
	case "replace":
		replaced = d.g.replace()
	case "decided":
		if d.g.cancelled(op.who, d.left.Load()) {
			d.g.respond(d.out, errorMsg)
		}
	case "client left":
		d.left.Store(true)
	}
	return order, replaced
}

// gateModel is what the gate must do, written out as plainly as possible.
type gateModel struct {
	state   gateState
	asked   bool // a cancel is pending
	begun   bool
	own     bool // the client asked to cancel, ever
	left    bool
	relayed bool
	expect  []sent
}

// apply is op in the model; it returns what the gate must return.
func (m *gateModel) apply(op gateOp) (order bool, replaced bool) {
	open := m.state == running || m.state == cancelling
	switch op.name {
	case "result":
		if open {
			m.state = answered
			m.expect = append(m.expect, sent{response: true})
		}
	case "progress", "log":
		if m.state == running {
			m.relayed = true
			m.expect = append(m.expect, sent{})
		}
	case "ask cancel":
		m.own = true
		if m.state == running && !m.asked {
			m.state, m.asked = cancelling, true
			order = m.begun
		}
	case "begin":
		m.begun = true
		order = m.asked
	case "cancel undecided":
		m.asked = false
		if m.state == cancelling {
			m.state = running
		}
	case "replace":
		if !m.relayed && m.state == running && !m.asked {
			m.begun, replaced = false, true
		}
	case "decided":
		// Silent for the client's own cancellation, and for anyone's once
		// the client asked to cancel or left: it expects nothing.
		silent := op.who == pb.Initiator_INITIATOR_CLIENT || op.who == pb.Initiator_INITIATOR_UNSPECIFIED || m.own || m.left
		switch {
		case !open:
		case silent:
			m.state = cancelled
		default:
			m.state = answered
			m.expect = append(m.expect, sent{response: true, isError: true})
		}
	case "client left":
		m.left = true
	}
	return order, replaced
}

// Every sequence of what can happen to a call: the gate is where the
// model says, lets out exactly what the model says, so at most one
// response, nothing after it, nothing after the client's own cancel, no
// progress once a cancel is asked for, and an error answer for every
// decision that was not the client's.
func TestGateFollowsItsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := &gateDriver{out: &recSink{}}
		var m gateModel
		for i, n := 0, rapid.IntRange(1, 30).Draw(t, "steps"); i < n; i++ {
			op := gateOpGen.Draw(t, "op")
			order, replaced := d.apply(op)
			wantOrder, wantReplaced := m.apply(op)
			if (order != nil) != wantOrder || replaced != wantReplaced {
				t.Fatalf("after %s/%v: order %v replaced %v, model %v %v", op.name, op.who, order, replaced, wantOrder, wantReplaced)
			}
			d.g.mu.Lock()
			state := d.g.state
			d.g.mu.Unlock()
			if state != m.state {
				t.Fatalf("after %s/%v: gate state %d, model %d", op.name, op.who, state, m.state)
			}
			if got := d.out.snapshot(); !equalSent(got, m.expect) {
				t.Fatalf("after %s/%v: the gate let out %+v, the model %+v", op.name, op.who, got, m.expect)
			}
		}
	})
}

// The same operations from many goroutines at once: whatever the order,
// at most one response goes out and nothing follows it.
func TestGateConcurrentAtMostOneWayOut(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := &gateDriver{out: &recSink{}}
		ops := rapid.SliceOfN(gateOpGen, 2, 12).Draw(t, "ops")
		var wg sync.WaitGroup
		for _, op := range ops {
			wg.Go(func() { d.apply(op) })
		}
		wg.Wait()
		got := d.out.snapshot()
		for i, s := range got {
			if s.response && i != len(got)-1 {
				t.Fatalf("something went out after the response: %+v", got)
			}
		}
		d.g.mu.Lock()
		state := d.g.state
		d.g.mu.Unlock()
		responded := len(got) > 0 && got[len(got)-1].response
		if responded != (state == answered) {
			t.Fatalf("state %d but the gate let out %+v", state, got)
		}
	})
}

func equalSent(a, b []sent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
