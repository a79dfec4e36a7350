package coordinator

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Bounds on what a worker's progress digest may hold; entries past them,
// or malformed, are dropped rather than the worker.
const (
	maxDigestCalls      = 1000
	maxDigestMessageLen = 128
)

// progressRecord is the value of progress/<worker>: the last progress of
// each of the worker's running calls that reported any, as of its last
// digest. Calls that have since settled may linger in it until the next
// digest; readers ignore them.
type progressRecord struct {
	Calls []callProgress `json:"calls"`
}

type callProgress struct {
	CallID   string    `json:"call_id"`
	At       time.Time `json:"at"`
	Progress float64   `json:"progress"`
	Total    float64   `json:"total,omitempty"`
	Message  string    `json:"message,omitempty"`
}

// progressWriter coalesces a worker's digests into one etcd write at a
// time: a digest that arrives while one is written replaces any waiting.
// Progress is lossy by design, so it never waits on etcd in the stream's
// read loop, and never goes through the decision committer.
type progressWriter struct {
	mu      sync.Mutex
	next    *string // the value to write next, if any
	writing bool    // a writer goroutine (of Server.bg) owns the writes
}

// workerProgress stores a's digest as progress/<worker>, replacing the
// last, on the worker's lease.
func (s *Server) workerProgress(ctx context.Context, a *attachment, d *pb.ProgressDigest) {
	v := encode(progressRecordOf(d))
	p := &a.progress
	p.mu.Lock()
	p.next = &v
	start := !p.writing
	p.writing = true
	p.mu.Unlock()
	if start && !s.bg.Go(func() { s.writeProgress(ctx, a) }) {
		p.mu.Lock()
		p.next, p.writing = nil, false
		p.mu.Unlock()
	}
}

// writeProgress writes what is waiting until nothing is. A failed write
// is not retried: the worker's next digest replaces it.
func (s *Server) writeProgress(ctx context.Context, a *attachment) {
	p := &a.progress
	for {
		p.mu.Lock()
		v := p.next
		p.next = nil
		if v == nil {
			p.writing = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		octx, cancel := s.opCtx(ctx)
		_, err := s.cli.Put(octx, s.keys.progressOf(a.worker), *v, clientv3.WithLease(a.lease.id))
		cancel()
		if err != nil {
			s.log.Debug("writing a progress digest", "worker", a.worker, "err", err)
		}
	}
}

// progressRecordOf keeps the digest's well-formed entries, within bounds.
func progressRecordOf(d *pb.ProgressDigest) *progressRecord {
	r := &progressRecord{Calls: []callProgress{}}
	for _, c := range d.GetCalls() {
		if len(r.Calls) == maxDigestCalls {
			break
		}
		if !validCallID(c.GetCallId()) || c.GetAt() == nil || !finite(c.GetProgress()) || !finite(c.GetTotal()) {
			continue
		}
		r.Calls = append(r.Calls, callProgress{CallID: c.GetCallId(), At: c.GetAt().AsTime(), Progress: c.GetProgress(),
			Total: c.GetTotal(), Message: shortMessage(c.GetMessage())})
	}
	return r
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// shortMessage is a progress message safe to show, cut to
// maxDigestMessageLen bytes on a character boundary.
func shortMessage(s string) string {
	s = SanitizeReason(s)
	if len(s) <= maxDigestMessageLen {
		return s
	}
	n := maxDigestMessageLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.TrimSpace(s[:n])
}

// progressByCall indexes the progress/ values read with the running
// calls, by call id, each with the worker whose digest named it.
type progressByCall map[string]workerProgress

type workerProgress struct {
	worker string
	callProgress
}

func (s *Server) progressByCall(kvs []*mvccpb.KeyValue) progressByCall {
	out := progressByCall{}
	for _, kv := range kvs {
		worker, ok := strings.CutPrefix(string(kv.Key), s.keys.progress())
		if !ok {
			continue
		}
		r, err := decode[progressRecord]("progress digest", kv.Value)
		if err != nil {
			s.log.Debug("skipping a progress digest", "worker", worker, "err", err)
			continue
		}
		for _, c := range r.Calls {
			out[c.CallID] = workerProgress{worker, c}
		}
	}
	return out
}

// fill sets rc's progress from its worker's digest; a worker speaks only
// for its own calls, so an entry in another's digest is ignored.
func (p progressByCall) fill(rc *pb.RunningCall) {
	c, ok := p[rc.GetCall().GetCallId()]
	if !ok || c.worker != rc.GetCall().GetWorker() {
		return
	}
	rc.LastProgress = timestamppb.New(c.At)
	rc.Progress, rc.Total, rc.ProgressMessage = c.Progress, c.Total, c.Message
}
