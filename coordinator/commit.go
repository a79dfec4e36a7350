package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pbetcd "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// etcd's default limits on one Txn (--max-txn-ops, --max-request-bytes).
// A batch keeps its encoded size well below the byte limit, since the
// estimate leaves out some framing.
const (
	maxTxnOps     = 128
	maxBatchBytes = 1 << 20 // of etcd's 1.5 MiB
)

// errCommitterStopped answers decisions submitted after Run returned.
var errCommitterStopped = fmt.Errorf("%w: the replica is stopping", ErrEtcd)

// committer is the replica's group commit. Decisions of concurrent calls
// (Begin's Txn, the settle Txn, stop reports) go to etcd together: while one
// Txn is in flight, the decisions that arrive wait, and the next Txn carries
// all of them, each as a nested Txn with its own guard, whose Succeeded its
// caller reads. Nothing waits on a timer: a decision that arrives when
// none is in flight goes out at once, alone, as a plain Txn.
//
// A batch stays within etcd's limits (its Txn count plus the largest nested
// Txn's at most maxTxnOps, which is how etcd counts; at most maxBatchBytes)
// and has no two decisions where one writes a key the other reads or
// writes: etcd rejects a Txn that writes a key twice, and evaluates every
// nested guard before any nested write, so two decisions on one call in
// one batch could both pass. Such a second decision waits for the next
// batch; decisions that only compare a key in common share one. A batch etcd rejects outright (as too large, or
// for a lease it no longer knows) is resent one decision at a time, so that
// each caller gets its own answer; an ambiguous failure (a timeout, a lost
// reply) is each caller's, who reads its decision back as it would after
// its own Txn failed so.
//
// One batch is in flight at a time, unless it stalls: a batch out for
// stallAfter (a proposal lost with a dying etcd leader waits out its
// whole timeout) holds up only its own decisions, and the next batch goes
// beside it, up to maxInFlight at once.
type committer struct {
	cli        *clientv3.Client
	timeout    time.Duration
	stallAfter time.Duration
	wake       chan struct{} // one token: the queue is not empty
	// took observes each Txn sent to etcd (metrics); nil: none.
	took func(time.Duration)

	mu      sync.Mutex
	queue   []*commitReq
	stopped bool
}

func newCommitter(cli *clientv3.Client, timeout time.Duration) *committer {
	return &committer{cli: cli, timeout: timeout, stallAfter: max(timeout/10, 100*time.Millisecond), wake: make(chan struct{}, 1)}
}

// maxInFlight bounds the batches in flight at once: one, and more only
// while the older ones stall. With etcd gone altogether they all stall,
// and the next waits for the oldest.
const maxInFlight = 4

// commitReq is one decision: a Txn waiting for its batch.
type commitReq struct {
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
	ops       int      // as etcd counts a Txn's operations: its longest list
	bytes     int      // roughly its encoded size
	reads     []string // the keys it compares or gets
	writes    []string // the keys it puts or deletes
	solo      bool     // it names a range, or nests a Txn: sent alone
	abandoned bool     // guarded by committer.mu: its caller gave up before it was taken

	resp *clientv3.TxnResponse
	err  error
	done chan struct{}
}

// Txn returns a Txn that goes to etcd in the next batch. ctx bounds only
// the wait: once taken into a batch, the decision is committed or fails
// with the batch, bounded by the replica's OpTimeout.
func (c *committer) Txn(ctx context.Context) clientv3.Txn {
	return &groupTxn{c: c, ctx: ctx, r: &commitReq{done: make(chan struct{})}}
}

var _ clientv3.Txn = (*groupTxn)(nil)

// groupTxn is the clientv3.Txn of one decision.
type groupTxn struct {
	c   *committer
	ctx context.Context
	r   *commitReq
}

func (t *groupTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.r.cmps = append(t.r.cmps, cs...)
	return t
}

func (t *groupTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.r.then = append(t.r.then, ops...)
	return t
}

func (t *groupTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.r.els = append(t.r.els, ops...)
	return t
}

// Commit queues the decision and waits for its batch's answer. If ctx
// ends first, a decision not yet taken is withdrawn; one in flight may
// still commit, so the caller reads it back, as after any timeout.
func (t *groupTxn) Commit() (*clientv3.TxnResponse, error) {
	r := t.r
	r.measure()
	if err := t.c.enqueue(r); err != nil {
		return nil, err
	}
	select {
	case <-r.done:
		return r.resp, r.err
	case <-t.ctx.Done():
		t.c.abandon(r)
		select {
		case <-r.done: // answered meanwhile
			return r.resp, r.err
		default:
			return nil, t.ctx.Err()
		}
	}
}

func (r *commitReq) measure() {
	r.ops = max(len(r.cmps), len(r.then), len(r.els))
	for i := range r.cmps {
		c := r.cmps[i].GetCompare()
		r.reads = append(r.reads, string(c.Key))
		r.bytes += proto.Size(c) + 4
		r.solo = r.solo || len(c.RangeEnd) > 0
	}
	for _, ops := range [][]clientv3.Op{r.then, r.els} {
		for _, op := range ops {
			if op.IsGet() {
				r.reads = append(r.reads, string(op.KeyBytes()))
			} else {
				r.writes = append(r.writes, string(op.KeyBytes()))
			}
			r.bytes += len(op.KeyBytes()) + len(op.RangeBytes()) + len(op.ValueBytes()) + 24
			r.solo = r.solo || op.IsTxn() || len(op.RangeBytes()) > 0
		}
	}
}

func (r *commitReq) finish(resp *clientv3.TxnResponse, err error) {
	r.resp, r.err = resp, err
	close(r.done)
}

func (c *committer) enqueue(r *commitReq) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return errCommitterStopped
	}
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// abandon withdraws r if no batch has taken it yet.
func (c *committer) abandon(r *commitReq) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.abandoned = true
}

// run sends batches until ctx ends, one Txn at a time but for stalls;
// the batches in flight then finish (within OpTimeout), and what is still
// queued fails with errCommitterStopped, as does whatever is submitted
// after.
func (c *committer) run(ctx context.Context) error {
	defer c.stop()
	var flying sync.WaitGroup
	defer flying.Wait() // before stop: a batch in flight is answered
	slots := make(chan struct{}, maxInFlight)
	stalled := time.NewTimer(c.stallAfter) // one for every batch, reset by send
	defer stalled.Stop()
	for ctx.Err() == nil {
		select {
		case <-c.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
		for batch := c.take(); len(batch) > 0; batch = c.take() {
			c.send(ctx, batch, slots, stalled, &flying)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return ctx.Err()
}

// send commits batch, on a goroutine run owns through flying, and waits
// for its answer or, if it stalls, for stallAfter: the next batch then
// goes out beside it. A slot is held for each batch in flight.
func (c *committer) send(ctx context.Context, batch []*commitReq, slots chan struct{}, stalled *time.Timer, flying *sync.WaitGroup) {
	slots <- struct{}{} // waits while maxInFlight are out; each ends within OpTimeout
	done := make(chan struct{})
	flying.Go(func() {
		defer func() { <-slots }()
		defer close(done)
		c.commit(ctx, batch)
	})
	stalled.Reset(c.stallAfter) // no stale tick: timers are unbuffered since Go 1.23
	select {
	case <-done:
		stalled.Stop()
	case <-stalled.C:
	}
}

func (c *committer) stop() {
	c.mu.Lock()
	q := c.queue
	c.queue, c.stopped = nil, true
	c.mu.Unlock()
	for _, r := range q {
		r.finish(nil, errCommitterStopped)
	}
}

// take removes the next batch from the queue: the decisions, oldest first,
// that fit together. One that does not fit, or names a key already in
// the batch, stays queued, ahead of those that arrive later.
func (c *committer) take() []*commitReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b batchBuilder
	rest := c.queue[:0]
	for _, r := range c.queue {
		switch {
		case r.abandoned:
		case b.add(r):
		default:
			rest = append(rest, r)
		}
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	return b.reqs
}

// batchBuilder gathers decisions that one Txn can carry. etcd evaluates
// every nested guard (and get) against the store as it was before the
// batch, then applies the writes: so decisions that only read a key in
// common (Begins on one worker compare its key) go together as if one ran
// after the other, but one that writes a key another reads or writes waits.
type batchBuilder struct {
	reqs    []*commitReq
	reads   map[string]struct{}
	writes  map[string]struct{}
	deepest int // the largest nested Txn's operation count
	bytes   int
	full    bool // a solo decision went in, or the limits were reached
}

// add puts r in the batch if it fits, and says whether it did.
func (b *batchBuilder) add(r *commitReq) bool {
	if len(b.reqs) == 0 { // the first always goes; too large, etcd says so
		b.reqs, b.deepest, b.bytes, b.full = append(b.reqs, r), r.ops, r.bytes, r.solo
		return true
	}
	if b.full || r.solo || len(b.reqs)+1+max(b.deepest, r.ops) > maxTxnOps || b.bytes+r.bytes > maxBatchBytes {
		return false
	}
	if b.reads == nil { // a second decision: a batch of one never builds the key sets
		first := b.reqs[0]
		b.reads, b.writes = make(map[string]struct{}, 8*len(first.reads)), make(map[string]struct{}, 8*len(first.writes))
		b.addKeys(first)
	}
	if b.conflicts(r) {
		return false
	}
	b.reqs, b.deepest, b.bytes = append(b.reqs, r), max(b.deepest, r.ops), b.bytes+r.bytes
	b.addKeys(r)
	return true
}

// conflicts says whether r writes a key the batch reads or writes, or
// reads a key the batch writes.
func (b *batchBuilder) conflicts(r *commitReq) bool {
	for _, k := range r.writes {
		if _, ok := b.writes[k]; ok {
			return true
		}
		if _, ok := b.reads[k]; ok {
			return true
		}
	}
	for _, k := range r.reads {
		if _, ok := b.writes[k]; ok {
			return true
		}
	}
	return false
}

func (b *batchBuilder) addKeys(r *commitReq) {
	for _, k := range r.reads {
		b.reads[k] = struct{}{}
	}
	for _, k := range r.writes {
		b.writes[k] = struct{}{}
	}
}

// commit sends one batch and answers each of its decisions. The Txn is
// bounded by OpTimeout, not by ctx: a stopping replica finishes it.
func (c *committer) commit(ctx context.Context, batch []*commitReq) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	if len(batch) == 1 {
		r := batch[0]
		start := time.Now()
		resp, err := c.cli.Txn(tctx).If(r.cmps...).Then(r.then...).Else(r.els...).Commit()
		c.observe(start)
		r.finish(resp, err)
		return
	}
	nested := make([]clientv3.Op, len(batch))
	for i, r := range batch {
		nested[i] = clientv3.OpTxn(r.cmps, r.then, r.els)
	}
	start := time.Now()
	resp, err := c.cli.Txn(tctx).Then(nested...).Commit()
	c.observe(start)
	switch {
	case err != nil && rejected(err):
		for _, r := range batch {
			c.commit(ctx, []*commitReq{r})
		}
	case err != nil:
		for _, r := range batch {
			r.finish(nil, err)
		}
	default:
		for i, r := range batch {
			r.finish(nestedResponse(resp, i))
		}
	}
}

func (c *committer) observe(start time.Time) {
	if c.took != nil {
		c.took(time.Since(start))
	}
}

// nestedResponse is the i-th decision's answer in a batch's response: its
// own Succeeded and responses, at the batch's revision.
func nestedResponse(resp *clientv3.TxnResponse, i int) (*clientv3.TxnResponse, error) {
	if i >= len(resp.Responses) || resp.Responses[i].GetResponseTxn() == nil {
		return nil, fmt.Errorf("%w: a batch's response lacks decision %d", ErrEtcd, i)
	}
	in := resp.Responses[i].GetResponseTxn()
	return (*clientv3.TxnResponse)(&pbetcd.TxnResponse{Header: resp.Header, Succeeded: in.Succeeded, Responses: in.Responses}), nil
}

// rejected says etcd refused the whole Txn before applying any of it, so
// each decision may safely be sent again on its own.
func rejected(err error) bool {
	for _, e := range []error{rpctypes.ErrTooManyOps, rpctypes.ErrDuplicateKey, rpctypes.ErrRequestTooLarge, rpctypes.ErrLeaseNotFound, rpctypes.ErrEmptyKey} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
