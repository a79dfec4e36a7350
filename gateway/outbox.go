package gateway

import (
	"errors"
	"sync"
	"time"
)

// errWriteTimeout means a client did not take a write within its deadline.
var errWriteTimeout = errors.New("gateway: client did not read within the write deadline")

// errTooFarBehind means a client let more bytes queue up than its outbox
// holds.
var errTooFarBehind = errors.New("gateway: client fell too far behind")

// streamWriter writes a batch of messages to one client stream, from one
// goroutine at a time, honouring the deadline where the stream can.
// abandonable reports whether a write still blocked past its deadline may
// be left behind (stdio: it ends when the stream closes); an HTTP
// response's writes may not outlive its handler.
type streamWriter interface {
	write(batch [][]byte, deadline time.Time) error
	abandonable() bool
}

// outbox is the one way messages reach a client stream: callers queue
// (never blocking on the network, so a gate's lock is never held across a
// write), and one goroutine writes, in order, each batch with a deadline.
// Progress is queued under a key and coalesced to the latest value while
// it waits, so a slow client costs a handler nothing. A client that lets a
// write pass its deadline, or falls more than limit bytes behind, is cut
// off: nothing more is written and cut is closed, for the stream's owner
// to end what only that stream could answer.
//
// Progress coalesces only once a backlog of coalesceAt bytes waits: a
// client that reads, however busy the machine, sees every step.
type outbox struct {
	w          streamWriter
	timeout    time.Duration
	limit      int
	coalesceAt int

	wake  chan struct{} // a message was queued, or the outbox is closing
	done  chan struct{} // closed when the writer goroutine has returned
	cut   chan struct{} // closed once the client is cut off
	watch *time.Timer   // cuts the client off when a write passes its deadline

	mu      sync.Mutex
	moved   *sync.Cond // signalled when a batch is written or the client cut off
	added   int        // messages ever queued (coalescing replaces, not adds)
	written int        // messages written
	queue   [][]byte
	keys    map[string]int // coalescing key → index in queue
	queued  int            // bytes in queue
	closing bool
	broken  bool
	cause   error
}

// coalesceBacklog is the backlog past which progress coalesces.
const coalesceBacklog = 64 << 10

// newOutbox starts the writer goroutine; close stops it and waits.
func newOutbox(w streamWriter, timeout time.Duration, limit int) *outbox {
	o := &outbox{
		w: w, timeout: timeout, limit: limit, coalesceAt: coalesceBacklog, keys: map[string]int{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), cut: make(chan struct{}),
	}
	o.watch = time.AfterFunc(time.Hour, func() {
		o.mu.Lock()
		o.cutLocked(errWriteTimeout)
		o.mu.Unlock()
	})
	o.watch.Stop()
	o.moved = sync.NewCond(&o.mu)
	go o.run() // owned: close waits for it
	return o
}

func (o *outbox) send(msg []byte) bool { return o.sendLatest("", msg) }

// sendLatest queues msg; with a key, it takes the place of an unsent
// message queued under the same key. It reports whether msg was queued.
func (o *outbox) sendLatest(key string, msg []byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.broken || o.closing {
		return false
	}
	if i, ok := o.keys[key]; ok && key != "" && o.queued >= o.coalesceAt {
		o.queued += len(msg) - len(o.queue[i])
		o.queue[i] = msg
		return true
	}
	if o.queued+len(msg) > o.limit && o.queued > 0 {
		o.cutLocked(errTooFarBehind)
		return false
	}
	if key != "" {
		o.keys[key] = len(o.queue)
	}
	o.queue = append(o.queue, msg)
	o.queued += len(msg)
	o.added++
	o.poke()
	return true
}

// streams says yes: an outbox is a stream (stdout, an SSE response).
func (o *outbox) streams() bool { return true }

func (o *outbox) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// cutLocked marks the client cut off, once.
func (o *outbox) cutLocked(cause error) {
	if o.broken {
		return
	}
	o.broken, o.cause = true, cause
	o.queue, o.queued = nil, 0
	clear(o.keys)
	close(o.cut)
	o.moved.Broadcast()
	o.poke()
}

// take waits for the next batch; it returns nil once the outbox is closed
// and drained, or cut off.
func (o *outbox) take() [][]byte {
	for {
		o.mu.Lock()
		if o.broken || (o.closing && len(o.queue) == 0) {
			o.mu.Unlock()
			return nil
		}
		if len(o.queue) > 0 {
			batch := o.queue
			o.queue, o.queued = nil, 0
			clear(o.keys)
			o.mu.Unlock()
			return batch
		}
		o.mu.Unlock()
		<-o.wake
	}
}

func (o *outbox) run() {
	defer close(o.done)
	for {
		batch := o.take()
		if batch == nil {
			return
		}
		err := o.writeBounded(batch)
		o.mu.Lock()
		if err != nil {
			o.cutLocked(err)
			o.mu.Unlock()
			return
		}
		o.written += len(batch)
		o.moved.Broadcast()
		o.mu.Unlock()
	}
}

// writeBounded writes one batch. The watch cuts the client off at the
// deadline even where the stream cannot honour it, so nothing waits on a
// write still blocked.
func (o *outbox) writeBounded(batch [][]byte) error {
	deadline := time.Now().Add(o.timeout)
	o.watch.Reset(o.timeout)
	defer o.watch.Stop()
	if err := o.w.write(batch, deadline); err != nil {
		if time.Now().After(deadline) {
			return errWriteTimeout
		}
		return err
	}
	return nil
}

// flush waits until what was queued so far is written, or the client was
// cut off (each write has its deadline, so this is bounded).
func (o *outbox) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for target := o.added; o.written < target && !o.broken; {
		o.moved.Wait()
	}
}

// close writes what is queued and stops. It returns once the writer is
// done or, for an abandonable writer, once the client was cut off.
func (o *outbox) close() {
	o.mu.Lock()
	o.closing = true
	o.poke()
	o.mu.Unlock()
	if !o.w.abandonable() {
		<-o.done
		return
	}
	select {
	case <-o.done:
	case <-o.cut:
	}
}

// err says why the client was cut off, or nil.
func (o *outbox) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cause
}
