package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// probe is one call a fault is aimed at: a Go SDK client (2025-11-25,
// over HTTP) whose call is recorded in the history like any other, with
// the fault's bounds on it.
type probe struct {
	in     *Injector
	c      *ClientCall
	w      *wire
	cs     *mcp.ClientSession
	cancel context.CancelFunc
	done   chan struct{} // the call returned
	stall  *stallable    // nil unless the probe reads slowly
	gw     int           // the gateway it talks to
	err    error         // what CallTool returned; read after done
}

// errProbeEnded means a probe's call returned before the fault could be
// aimed at it: the aftermath of an earlier fault (its worker's link still
// silent, say) failed it, which is no failure of this fault's recovery.
var errProbeEnded = errors.New("the probe's call ended before its first progress")

// startProbe starts a call of the sleep tool for the fault kind.
func (in *Injector) startProbe(ctx context.Context, kind string, seconds float64, steps int, slow bool) (*probe, error) {
	wl := in.wl
	token, principal := wl.nextPrincipal()
	p := &probe{in: in, w: newWire(nil), done: make(chan struct{}), gw: in.r.IntN(2)}
	var base http.RoundTripper = wl.http
	if slow {
		p.stall = newStallable()
		base = p.stall.transport()
	}
	t := &mcp.StreamableClientTransport{
		Endpoint:   wl.c.MCPURL(p.gw),
		HTTPClient: &http.Client{Transport: &tapTransport{base: base, token: token, w: p.w}},
		MaxRetries: -1, DisableStandaloneSSE: true,
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "robustness-probe", Version: "0"}, nil).Connect(cctx, t,
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("probe client: %w", err)
	}
	p.cs = cs
	progress := fmt.Sprintf("probe%d", wl.seq.Add(1))
	p.c = &ClientCall{Ref: "probe-" + kind + "/" + principal, Client: "probe-" + kind, Owner: principal, Tool: "sleep", Probe: kind,
		Gateway: gatewayName(p.gw)}
	p.w.expect(progress, p.c)
	wl.rec.add(p.c)
	callCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), callTimeout+5*time.Second)
	p.cancel = stop
	go func() { // owned by p: wait() waits for done
		defer close(p.done)
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "sleep",
			Arguments: map[string]any{"seconds": seconds, "steps": steps}, Meta: mcp.Meta{"progressToken": progress}})
		p.err = err
		if err != nil {
			p.w.mark(func() {
				if len(p.c.Responses) == 0 && p.c.CancelSent.IsZero() && p.c.Broken.IsZero() {
					p.c.CancelSent, p.c.TimedOut = time.Now(), true
				}
			})
		}
	}()
	return p, nil
}

// progressed waits until the client has seen n progress notifications.
// The bound is 20 s, not 10: a probe begun just after two coordinators
// were paused back to back waits for its worker to re-attach on a new
// lease first (seen in CI: both paused at 14:51:19 and :25, the probe's
// first progress later than 10 s).
//
// A call that returns first ends the wait with errProbeEnded; one that
// is still running with too little progress ends it with the probe's
// record, so that the report says where it stood.
func (p *probe) progressed(ctx context.Context, n int) error {
	got := 0
	err := waitFor(ctx, 20*time.Second, "probe progress", func() bool {
		p.w.mark(func() { got = len(p.c.Progress) })
		return got >= n || p.ended()
	})
	switch {
	case got >= n:
		return nil
	case err == nil:
		return fmt.Errorf("%w (%d of %d): %v", errProbeEnded, got, n, p.err)
	}
	var record []byte
	p.w.mark(func() { record, _ = json.Marshal(p.c) })
	return fmt.Errorf("%w; the probe's call: %s", err, record)
}

// ended says the probe's call has returned.
func (p *probe) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// worker waits until the probe's call is placed and returns its worker's
// slot.
func (p *probe) worker(ctx context.Context) (int, error) {
	slot := -1
	err := waitFor(ctx, 10*time.Second, "the probe's call record", func() bool {
		name := p.in.co.workerOf(p.c.Owner)
		p.in.c.mu.Lock()
		defer p.in.c.mu.Unlock()
		for i, n := range p.in.c.workerName {
			if n == name && name != "" {
				slot = i
			}
		}
		return slot >= 0
	})
	return slot, err
}

// mark sets fields of the probe's record under the wire's lock.
func (p *probe) mark(f func(c *ClientCall)) { p.w.mark(func() { f(p.c) }) }

// wait waits for the call to return, then closes the client.
func (p *probe) wait() {
	<-p.done
	if p.stall != nil {
		p.stall.resume()
	}
	p.cs.Close()
	p.cancel()
}

// workerOf returns the worker of the call a principal made, if etcd holds
// one.
func (co *collector) workerOf(principal string) string {
	co.mu.Lock()
	defer co.mu.Unlock()
	for _, s := range co.calls {
		if s.Principal == principal && s.Worker != "" {
			return s.Worker
		}
	}
	return ""
}

// stallable is a client transport whose event streams can stop being
// read: its sockets have a small receive buffer, so the gateway's writes
// soon block.
type stallable struct {
	base *http.Transport

	mu      sync.Mutex
	stalled chan struct{} // non-nil while stalled; closed on resume
}

func newStallable() *stallable {
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	return &stallable{base: &http.Transport{DialContext: d.DialContext}}
}

func (s *stallable) stop() {
	s.mu.Lock()
	if s.stalled == nil {
		s.stalled = make(chan struct{})
	}
	s.mu.Unlock()
}

func (s *stallable) resume() {
	s.mu.Lock()
	if s.stalled != nil {
		close(s.stalled)
		s.stalled = nil
	}
	s.mu.Unlock()
}

func (s *stallable) gate() {
	s.mu.Lock()
	ch := s.stalled
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (s *stallable) transport() http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := s.base.RoundTrip(req)
		if err == nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = &stallReader{ReadCloser: resp.Body, s: s}
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// stallReader reads nothing while its transport is stalled.
type stallReader struct {
	io.ReadCloser
	s *stallable
}

func (r *stallReader) Read(p []byte) (int, error) {
	r.s.gate()
	return r.ReadCloser.Read(p)
}
