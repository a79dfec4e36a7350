package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

func acceptsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), contentSSE)
}

// whileReading returns a context that ends with ctx, or when out's client
// is cut off for not reading; stop ends it and waits for its watcher.
func whileReading(ctx context.Context, out *outbox) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned: stop waits for it
		defer close(done)
		select {
		case <-out.cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); <-done }
}

// jsonSink answers one request with a JSON body. It keeps the one
// response; the handler writes it once the request is settled.
type jsonSink struct {
	mu  sync.Mutex
	msg []byte
	// notFound answers -32601 with 404, as 2026-07-28 asks.
	notFound   bool
	methodGone bool
}

func (j *jsonSink) send(msg []byte) bool {
	var probe struct {
		ID    json.RawMessage `json:"id"`
		Error *jsonrpc.Error  `json:"error"`
	}
	if json.Unmarshal(msg, &probe) != nil || probe.ID == nil {
		return false // only the response belongs here; notifications are dropped
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.msg != nil {
		return false
	}
	j.msg = msg
	j.methodGone = probe.Error != nil && probe.Error.Code == jsonrpc.CodeMethodNotFound
	return true
}

func (j *jsonSink) sendLatest(string, []byte) bool { return false }

// streams says no: a JSON response carries the response alone.
func (j *jsonSink) streams() bool { return false }

// flush does nothing: the handler writes the response once the request
// returns.
func (j *jsonSink) flush() {}

// writeTo writes the response, if there is one, within timeout; it
// reports whether there was.
func (j *jsonSink) writeTo(w http.ResponseWriter, timeout time.Duration) bool {
	j.mu.Lock()
	msg, gone := j.msg, j.methodGone
	j.mu.Unlock()
	if msg == nil {
		return false
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout))
	w.Header().Set("Content-Type", contentJSON)
	if j.notFound && gone {
		w.WriteHeader(http.StatusNotFound)
	}
	w.Write(msg)
	return true
}

// sseSink streams messages as Server-Sent Events through an outbox. The
// handler must close it before it returns: the ResponseWriter is not to
// be used after.
type sseSink struct {
	*outbox
	finished chan struct{}
	once     sync.Once
}

// newSSE sends the stream's headers at once (so the client learns the
// scope before any event) and starts its writer.
func (g *Gateway) newSSE(w http.ResponseWriter) *sseSink {
	h := w.Header()
	h.Set("Content-Type", contentSSE)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(g.opts.WriteTimeout))
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	return &sseSink{
		outbox:   newOutbox(&sseWriter{w: w, rc: rc}, g.opts.WriteTimeout, g.outboxLimit()),
		finished: make(chan struct{}),
	}
}

// sseWriter writes events to one HTTP response, each batch within its
// deadline, flushed once.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sseWriter) write(batch [][]byte, deadline time.Time) error {
	s.rc.SetWriteDeadline(deadline)
	for _, msg := range batch {
		if _, err := fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", msg); err != nil {
			return err
		}
	}
	return s.rc.Flush()
}

func (s *sseWriter) abandonable() bool { return false }

// finish marks the stream done: nothing more will be written.
func (s *sseSink) finish() { s.once.Do(func() { close(s.finished) }) }
