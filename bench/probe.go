package main

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
)

// probeTool is registered on the bench's in-process worker only. A call
// signals that its handler started, waits for its context, and records
// when the context was done (the same clock the client's cancel is timed
// with) and when the handler returned.
var probeTool = worker.Tool{
	Name:        "bench_probe",
	Description: "Benchmark probe: waits until cancelled, recording when.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"token":{"type":"string"}},"required":["token"]}`),
}

type probe struct {
	started chan struct{}
	done    chan time.Time // when ctx was done
}

type probes struct {
	next     atomic.Int64
	running  atomic.Int64 // handlers that have not returned
	returned atomic.Int64 // last handler return, UnixNano

	mu sync.Mutex
	m  map[string]*probe
}

func newProbes() *probes { return &probes{m: map[string]*probe{}} }

// add returns a fresh token and its probe.
func (ps *probes) add() (string, *probe) {
	tok := strconv.FormatInt(ps.next.Add(1), 10)
	p := &probe{started: make(chan struct{}), done: make(chan time.Time, 1)}
	ps.mu.Lock()
	ps.m[tok] = p
	ps.mu.Unlock()
	return tok, p
}

func (ps *probes) take(tok string) *probe {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[tok]
	delete(ps.m, tok)
	return p
}

func (ps *probes) handle(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	ps.running.Add(1)
	defer func() {
		ps.returned.Store(time.Now().UnixNano())
		ps.running.Add(-1)
	}()
	var a struct{ Token string }
	if err := c.Bind(&a); err != nil {
		return nil, err
	}
	p := ps.take(a.Token)
	if p != nil {
		close(p.started)
	}
	<-ctx.Done()
	if p != nil {
		p.done <- time.Now()
	}
	return nil, ctx.Err()
}
