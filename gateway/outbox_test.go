package gateway

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// blockingWriter's writes block until hold is closed, as a client's that
// stopped reading do.
type blockingWriter struct {
	hold    chan struct{}
	canDrop bool
}

func (b *blockingWriter) write([][]byte, time.Time) error {
	<-b.hold
	return errors.New("stream closed")
}

func (b *blockingWriter) abandonable() bool { return b.canDrop }

// orderWriter writes everything; the first write waits for go-ahead so
// that messages queue behind it.
type orderWriter struct {
	mu      sync.Mutex
	first   chan struct{}
	written []string
}

func (w *orderWriter) write(batch [][]byte, _ time.Time) error {
	w.mu.Lock()
	first := w.first
	w.first = nil
	w.mu.Unlock()
	if first != nil {
		<-first
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range batch {
		w.written = append(w.written, string(m))
	}
	return nil
}

func (w *orderWriter) abandonable() bool { return false }

// Progress queued while the stream is busy is replaced by the newest
// value, in its place: everything else keeps its order, and a result
// queued after progress is written after it.
func TestOutboxKeepsOrderAndCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		goAhead := make(chan struct{})
		w := &orderWriter{first: goAhead}
		o := newOutbox(w, time.Minute, 1<<20)
		o.coalesceAt = 0 // as if a backlog were waiting
		o.send([]byte("first"))
		synctest.Wait() // the writer holds "first"
		o.sendLatest("p", []byte("progress 1"))
		o.send([]byte("log"))
		o.sendLatest("p", []byte("progress 2"))
		o.sendLatest("q", []byte("other progress"))
		o.sendLatest("p", []byte("progress 3"))
		o.send([]byte("result"))
		close(goAhead)
		o.close()
		want := []string{"first", "progress 3", "log", "other progress", "result"}
		if !slices.Equal(w.written, want) {
			t.Fatalf("written %q, want %q", w.written, want)
		}
		if o.send([]byte("late")) {
			t.Fatal("a closed outbox took a message")
		}
	})
}

// Below the backlog, every progress step is kept.
func TestOutboxKeepsEveryStepWithoutBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		goAhead := make(chan struct{})
		w := &orderWriter{first: goAhead}
		o := newOutbox(w, time.Minute, 1<<20)
		o.send([]byte("first"))
		synctest.Wait()
		o.sendLatest("p", []byte("progress 1"))
		o.sendLatest("p", []byte("progress 2"))
		close(goAhead)
		o.close()
		if want := []string{"first", "progress 1", "progress 2"}; !slices.Equal(w.written, want) {
			t.Fatalf("written %q, want %q", w.written, want)
		}
	})
}

// A client that takes no write within the deadline is cut off at the
// deadline, even by a writer that ignores deadlines; close then returns
// for an abandonable stream without waiting for the blocked write.
func TestOutboxCutsOffAStalledClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold := make(chan struct{})
		w := &blockingWriter{hold: hold, canDrop: true}
		o := newOutbox(w, 5*time.Second, 1<<20)
		start := time.Now()
		o.send([]byte("stuck"))
		<-o.cut
		if took := time.Since(start); took != 5*time.Second {
			t.Fatalf("cut off after %v, want the 5s deadline", took)
		}
		if !errors.Is(o.err(), errWriteTimeout) {
			t.Fatalf("cut off for %v", o.err())
		}
		if o.send([]byte("more")) {
			t.Fatal("a cut-off outbox took a message")
		}
		o.close() // returns at once: the blocked write is abandoned
		close(hold)
		<-o.done
	})
}

// A client that falls more than the limit behind is cut off at once, and
// what was queued for it is dropped.
func TestOutboxCutsOffAClientTooFarBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		goAhead := make(chan struct{})
		w := &orderWriter{first: goAhead}
		o := newOutbox(w, time.Minute, 10)
		o.send([]byte("first"))
		synctest.Wait()
		if !o.send([]byte("123456")) {
			t.Fatal("a message within the limit was refused")
		}
		if o.send([]byte("123456")) {
			t.Fatal("a message past the limit was taken")
		}
		if !errors.Is(o.err(), errTooFarBehind) {
			t.Fatalf("cut off for %v", o.err())
		}
		close(goAhead)
		o.close()
		if !slices.Equal(w.written, []string{"first"}) {
			t.Fatalf("written %q after the cut", w.written)
		}
	})
}
