package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// maxProbeBatch is the most call ids one GetCallStates names (the
// coordinator's bound).
const maxProbeBatch = 1024

// prober batches the quiet-stream probes of a gateway's calls (quiet.go):
// while one GetCallStates is out, the probes that come meanwhile wait and
// go out together in the next, so that a gateway with thousands of quiet
// calls reads their states in about one RPC per probe interval rather
// than one per call. Nothing waits on a timer: a probe that comes when
// none is out goes at once.
type prober struct {
	g *Gateway

	mu      sync.Mutex
	queue   []*probeReq
	sending bool
	// perCall: the coordinators have no GetCallStates (a release
	// before it); each probe reads its own call.
	// Compat(v0.2): v0.1 coordinators; drop in v0.3.
	perCall atomic.Bool
}

type probeReq struct {
	id    string
	state pb.CallState
	done  chan struct{}
}

// state is the call's state at the coordinator; RUNNING when it cannot be
// asked in time, so the call runs on.
func (p *prober) state(id string) pb.CallState {
	if p.perCall.Load() {
		return p.one(id)
	}
	r := &probeReq{id: id, state: pb.CallState_CALL_STATE_RUNNING, done: make(chan struct{})}
	p.mu.Lock()
	p.queue = append(p.queue, r)
	start := !p.sending
	p.sending = true
	p.mu.Unlock()
	if start && !p.g.spawned(&p.g.probes, p.drain) {
		p.mu.Lock()
		waiting := p.queue
		p.sending, p.queue = false, nil // the gateway is closing: nobody asks
		p.mu.Unlock()
		for _, w := range waiting {
			close(w.done) // RUNNING
		}
	}
	t := time.NewTimer(2 * probeTimeout) // the batch ahead, then this one
	defer t.Stop()
	select {
	case <-r.done:
		return r.state
	case <-t.C:
		return pb.CallState_CALL_STATE_RUNNING
	}
}

// drain sends batches until none is waiting.
func (p *prober) drain() {
	for {
		p.mu.Lock()
		batch := p.queue
		if len(batch) > maxProbeBatch {
			batch, p.queue = batch[:maxProbeBatch], batch[maxProbeBatch:]
		} else {
			p.queue = nil
		}
		if len(batch) == 0 {
			p.sending = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.send(batch)
	}
}

// send asks for one batch's states and answers each probe.
func (p *prober) send(batch []*probeReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	ids := make([]string, len(batch))
	for i, r := range batch {
		ids[i] = r.id
	}
	ctx, cancel := context.WithTimeout(p.g.base, probeTimeout)
	defer cancel()
	got, err := p.g.coord.GetCallStates(ctx, &pb.GetCallStatesRequest{CallIds: ids})
	if status.Code(err) == codes.Unimplemented {
		p.perCall.Store(true) // this round's probes answer RUNNING; the next ask one by one
	}
	if err != nil || len(got.GetStates()) != len(batch) {
		return
	}
	for i, st := range got.GetStates() {
		if st != pb.CallState_CALL_STATE_UNSPECIFIED { // no record yet: running
			batch[i].state = st
		}
	}
}

// one reads one call's state.
func (p *prober) one(id string) pb.CallState {
	ctx, cancel := context.WithTimeout(p.g.base, probeTimeout)
	defer cancel()
	got, err := p.g.coord.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: id}})
	if err != nil {
		return pb.CallState_CALL_STATE_RUNNING
	}
	return got.GetCall().GetState()
}
