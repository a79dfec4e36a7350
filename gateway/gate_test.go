package gateway

import (
	"encoding/json"
	"log/slog"
	"sync"
	"testing"

	"pgregory.net/rapid"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
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

func (r *recSink) flush() {}

func (r *recSink) snapshot() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.msgs...)
}

// gateCall is a call whose gate can be driven without a coordinator:
// Begin has not returned, so a cancel is only asked for, and the outcome
// of every race is fed in by the test.
func gateCall() (*call, *recSink) {
	g := &Gateway{log: slog.New(slog.DiscardHandler)}
	out := &recSink{}
	s := newSession(g, "conn:gate", anonymous)
	return &call{s: s, id: jsonrpc.Int(1), reply: out, token: json.RawMessage(`"tok"`)}, out
}

// gateOp is one thing that can happen to a call: its worker answers,
// progress or a log arrives, the gateway asks to cancel, that ask fails,
// or a decision comes back naming who won.
type gateOp struct {
	name string
	who  pb.Initiator
}

var gateOps = []gateOp{
	{name: "result"}, {name: "progress"}, {name: "log"}, {name: "ask cancel"}, {name: "cancel undecided"},
	{name: "decided", who: pb.Initiator_INITIATOR_CLIENT},
	{name: "decided", who: pb.Initiator_INITIATOR_UNSPECIFIED},
	{name: "decided", who: pb.Initiator_INITIATOR_TIMEOUT},
	{name: "decided", who: pb.Initiator_INITIATOR_OPERATOR},
	{name: "decided", who: pb.Initiator_INITIATOR_SHUTDOWN},
	{name: "decided", who: pb.Initiator_INITIATOR_DISCONNECT},
	{name: "decided", who: pb.Initiator_INITIATOR_WORKER_LOST},
	{name: "client left"},
}

func (op gateOp) apply(c *call) {
	switch op.name {
	case "result":
		c.respond(c.result(json.RawMessage(`{"content":[]}`)))
	case "progress":
		c.progress(&pb.Progress{Progress: 1})
	case "log":
		c.log(&pb.LogMessage{Level: "error", DataJson: []byte(`"x"`)})
	case "ask cancel":
		c.requestCancel(pb.Initiator_INITIATOR_CLIENT, "changed my mind")
	case "cancel undecided":
		c.cancelUndecided()
	case "decided":
		c.cancelledBy(op.who, "why")
	case "client left":
		c.s.setLeft(true)
	}
}

// gateModel is what the gate must do, written out as plainly as possible.
type gateModel struct {
	state  int // running, cancelling, answered, cancelled
	asked  bool
	own    bool // the client asked to cancel, ever
	left   bool
	expect []sent
}

func (m *gateModel) apply(op gateOp) {
	open := m.state == running || m.state == cancelling
	switch op.name {
	case "result":
		if open {
			m.state = answered
			m.expect = append(m.expect, sent{response: true})
		}
	case "progress", "log":
		if m.state == running {
			m.expect = append(m.expect, sent{})
		}
	case "ask cancel":
		m.own = true
		if m.state == running && !m.asked {
			m.state, m.asked = cancelling, true
		}
	case "cancel undecided":
		m.asked = false
		if m.state == cancelling {
			m.state = running
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
}

// Every sequence of what can happen to a call: the gate is where the
// model says, lets out exactly what the model says, so at most one
// response, nothing after it, nothing after the client's own cancel, no
// progress once a cancel is asked for, and an error answer for every
// decision that was not the client's.
func TestGateFollowsItsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c, out := gateCall()
		var m gateModel
		for i, n := 0, rapid.IntRange(1, 30).Draw(t, "steps"); i < n; i++ {
			op := rapid.SampledFrom(gateOps).Draw(t, "op")
			op.apply(c)
			m.apply(op)
			c.mu.Lock()
			state := c.state
			c.mu.Unlock()
			if state != m.state {
				t.Fatalf("after %s/%v: gate state %d, model %d", op.name, op.who, state, m.state)
			}
			if got := out.snapshot(); !equalSent(got, m.expect) {
				t.Fatalf("after %s/%v: the gate let out %+v, the model %+v", op.name, op.who, got, m.expect)
			}
		}
	})
}

// The same operations from many goroutines at once: whatever the order,
// at most one response goes out and nothing follows it.
func TestGateConcurrentAtMostOneWayOut(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c, out := gateCall()
		ops := rapid.SliceOfN(rapid.SampledFrom(gateOps), 2, 12).Draw(t, "ops")
		var wg sync.WaitGroup
		for _, op := range ops {
			wg.Go(func() { op.apply(c) })
		}
		wg.Wait()
		got := out.snapshot()
		for i, s := range got {
			if s.response && i != len(got)-1 {
				t.Fatalf("something went out after the response: %+v", got)
			}
		}
		c.mu.Lock()
		state := c.state
		c.mu.Unlock()
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
