package robustness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Workload drives the cluster with real MCP clients and records what
// they see.
type Workload struct {
	c       *Cluster
	seed    int64
	nodeDir string // test/clients with node_modules; empty: no TS clients
	rec     recorder

	seq       atomic.Int64 // progress tokens and refs
	principal atomic.Int64 // next token/principal index
	stdio     atomic.Int64 // next stdio gateway name
	tokens    int
	cancels   atomic.Int64 // cancels sent, to pace the run
	http      *http.Transport
	taskLoops int      // concurrent task clients (tasks.go)
	tasks     taskLoad // what they saw
	window    windowSignal
}

// plan is one call's tool, arguments and client behaviour.
type plan struct {
	tool        string
	args        map[string]any
	expected    time.Duration
	cancelAfter time.Duration // 0: never
}

func (wl *Workload) newPlan(r *rand.Rand) plan {
	var p plan
	switch x := r.IntN(100); {
	case x < 60:
		secs := 0.02 + r.Float64()*0.6
		p = plan{tool: "sleep", args: map[string]any{"seconds": secs, "steps": 1 + r.IntN(6)}, expected: time.Duration(secs * float64(time.Second))}
	case x < 75:
		ms := 5 + r.IntN(120)
		p = plan{tool: "spin", args: map[string]any{"millis": ms}, expected: time.Duration(ms) * time.Millisecond}
	default:
		p = plan{tool: "echo", args: map[string]any{"text": fmt.Sprintf("hello %d", r.IntN(1e6))}}
	}
	if r.IntN(100) < 35 {
		// Near completion as often as early: uniform over 1.3x the duration.
		p.cancelAfter = time.Duration(r.Int64N(int64(p.expected*13/10)+int64(20*time.Millisecond))) + time.Millisecond
	}
	return p
}

// hardTimeout bounds a call on the client side; expiring is a cancel.
// It is past the gateway's own call timeout, so that a client left without
// an answer waits long enough for the checker to see it (see
// checkAnswered), and a call that hangs is answered by the gateway.
func (p plan) hardTimeout() time.Duration { return callTimeout + 5*time.Second }

func (wl *Workload) nextPrincipal() (token, principal string) {
	i := wl.principal.Add(1) % int64(wl.tokens)
	return fmt.Sprintf("t%d", i), fmt.Sprintf("p%d", i)
}

// Run runs loops of sessions until ctx ends, then waits for them.
func (wl *Workload) Run(ctx context.Context, goHTTP, goStdio, ts int) {
	var wg sync.WaitGroup
	loop := func(i int, session func(context.Context, *rand.Rand)) {
		defer wg.Done()
		r := rand.New(rand.NewPCG(uint64(wl.seed), uint64(i)))
		for ctx.Err() == nil {
			session(ctx, r)
		}
	}
	n := 0
	for range goHTTP {
		wg.Add(1)
		go loop(n, wl.goHTTPSession)
		n++
	}
	for range goStdio {
		wg.Add(1)
		go loop(n, wl.goStdioSession)
		n++
	}
	if wl.nodeDir != "" {
		for range ts {
			wg.Add(1)
			go loop(n, wl.tsCall)
			n++
		}
	}
	wg.Go(func() { wl.runTasks(ctx, wl.taskLoops) })
	wg.Wait()
}

// pace waits d or until ctx ends: a pause between client attempts.
func pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// session is one connected Go SDK client and the calls it runs.
type session struct {
	wl      *Workload
	cs      *mcp.ClientSession
	w       *wire
	kind    string
	owner   string
	byGW    bool
	gateway string // the HTTP gateway's name (gatewayName), or the stdio gateway's
	broken  atomic.Bool
}

func (wl *Workload) goHTTPSession(ctx context.Context, r *rand.Rand) {
	gw := r.IntN(2)
	token, principal := wl.nextPrincipal()
	w := newWire(nil)
	w.sent = func(c *ClientCall, at time.Time) { wl.window.sent(gw, c, at) }
	t := &mcp.StreamableClientTransport{
		Endpoint:   wl.c.MCPURL(gw),
		HTTPClient: &http.Client{Transport: &tapTransport{base: wl.http, token: token, w: w}},
		MaxRetries: -1, DisableStandaloneSSE: true,
	}
	era, opts := eraOf(r)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "robustness", Version: "0"}, nil).Connect(cctx, t, opts)
	cancel()
	if err != nil {
		pace(ctx, 200*time.Millisecond)
		return
	}
	s := &session{wl: wl, cs: cs, w: w, kind: "go-http-" + era, owner: principal, gateway: gatewayName(gw)}
	s.run(ctx, r)
}

func (wl *Workload) goStdioSession(ctx context.Context, r *rand.Rand) {
	name := fmt.Sprintf("gs%d", wl.stdio.Add(1))
	cmd := exec.Command(wl.c.opts.Bin, wl.c.StdioArgs(name)...)
	wl.c.rel.set(name, false)
	log, err := os.Create(filepath.Join(wl.c.opts.Dir, name+".log"))
	if err != nil {
		return
	}
	defer log.Close()
	cmd.Stderr = log
	dieWithTest(cmd)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		pace(ctx, 200*time.Millisecond)
		return
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }() // reaped here
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			cmd.Process.Kill()
			<-done
		}
	}()
	w := newWire(nil)
	tr := &mcp.IOTransport{
		Reader: &tapReader{ReadCloser: stdout, l: &lines{f: func(b []byte) { w.in(b, time.Now()) }}},
		Writer: &tapWriter{WriteCloser: stdin, l: &lines{f: func(b []byte) { w.out(b, time.Now()) }}},
	}
	era, opts := eraOf(r)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "robustness", Version: "0"}, nil).Connect(cctx, tr, opts)
	cancel()
	if err != nil {
		pace(ctx, 200*time.Millisecond)
		return
	}
	s := &session{wl: wl, cs: cs, w: w, kind: "go-stdio-" + era, owner: name, byGW: true, gateway: name}
	s.run(ctx, r)
}

// eraOf picks the protocol half the Go sessions speak: 2026-07-28 (the
// SDK's default; over HTTP, closing the request stream is the cancel) or
// 2025-11-25 (sessionful; notifications/cancelled).
func eraOf(r *rand.Rand) (string, *mcp.ClientSessionOptions) {
	if r.IntN(2) == 0 {
		return "2025", &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	}
	return "2026", nil
}

// run makes 5..30 calls, 1..3 at a time, then closes the session;
// sometimes it closes the session with calls in flight (a disconnect).
func (s *session) run(ctx context.Context, r *rand.Rand) {
	n, par := 5+r.IntN(26), 1+r.IntN(3)
	disconnect := r.IntN(100) < 15
	plans := make(chan plan, n)
	for range n {
		plans <- s.wl.newPlan(r)
	}
	close(plans)
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range plans {
				if ctx.Err() != nil || s.broken.Load() {
					return
				}
				s.call(ctx, p)
			}
		}()
	}
	if disconnect {
		pace(ctx, time.Duration(r.Int64N(int64(2*time.Second))))
		s.w.mark(func() {
			now := time.Now()
			for _, c := range s.w.byID {
				if len(c.Responses) == 0 {
					c.Disconnect = now
				}
			}
		})
		s.broken.Store(true)
		s.cs.Close()
	}
	wg.Wait()
	s.cs.Close()
}

func (s *session) call(ctx context.Context, p plan) {
	token := fmt.Sprintf("c%d", s.wl.seq.Add(1))
	c := &ClientCall{Ref: s.kind + "/" + s.owner + "/" + token, Client: s.kind, Owner: s.owner, ByGateway: s.byGW, Tool: p.tool, Gateway: s.gateway}
	s.w.expect(token, c)
	s.wl.rec.add(c)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.hardTimeout())
	defer cancel()
	if p.cancelAfter > 0 {
		t := time.AfterFunc(p.cancelAfter, func() {
			s.w.mark(func() {
				if len(c.Responses) == 0 && c.CancelSent.IsZero() {
					c.CancelSent = time.Now()
					s.wl.cancels.Add(1)
				}
			})
			cancel()
		})
		defer t.Stop()
	}
	_, err := s.cs.CallTool(cctx, &mcp.CallToolParams{Name: p.tool, Arguments: p.args, Meta: mcp.Meta{"progressToken": token}})
	if err == nil {
		return
	}
	now := time.Now()
	s.w.mark(func() {
		switch {
		case len(c.Responses) > 0, !c.CancelSent.IsZero(), !c.Disconnect.IsZero():
		case errors.Is(err, context.DeadlineExceeded):
			c.CancelSent, c.TimedOut = now, true // our hard timeout: the SDK cancels
		default:
			c.Broken = now
			s.broken.Store(true)
		}
	})
}

// lostFirst says the SDK reported the call's stream cut (at lost) before
// any answer came: both SDKs then leave the call pending until their own
// timeout (v1 records it as a cancel, -32001), though the transport broke
// at lost. The caller holds the wire's lock.
func lostFirst(c *ClientCall, lost time.Time) bool {
	return !lost.IsZero() && lost.After(c.Sent) && len(c.Responses) == 0
}

// tsCall runs one call through a TypeScript SDK client process.
func (wl *Workload) tsCall(ctx context.Context, r *rand.Rand) {
	script, kind := "call2025.mjs", "ts2025"
	if r.IntN(2) == 0 {
		script, kind = "call2026.mjs", "ts2026"
	}
	token, principal := wl.nextPrincipal()
	secs := 0.05 + r.Float64()*0.6
	gw := r.IntN(2)
	args := []string{filepath.Join(wl.nodeDir, script), "--url", wl.c.MCPURL(gw), "--tool", "sleep",
		"--args", fmt.Sprintf(`{"seconds":%.3f,"steps":%d}`, secs, 1+r.IntN(5)),
		"--header", "Authorization:Bearer " + token, "--no-list", "--linger-ms", "300", "--timeout-ms", fmt.Sprint((callTimeout + 5*time.Second).Milliseconds())}
	if r.IntN(100) < 50 {
		args = append(args, "--cancel-after-ms", fmt.Sprint(r.IntN(int(secs*1300)+20)))
	}
	w := newWire(nil)
	var c *ClientCall
	w.fresh = func(tool string) *ClientCall {
		c = &ClientCall{Ref: kind + "/" + principal, Client: kind, Owner: principal, Tool: tool, Gateway: gatewayName(gw)}
		wl.rec.add(c)
		return c
	}
	cmd := exec.CommandContext(context.WithoutCancel(ctx), "node", args...)
	cmd.Dir = wl.nodeDir
	cmd.Stderr = io.Discard
	dieWithTest(cmd)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		pace(ctx, time.Second)
		return
	}
	var callErr bool
	var streamLost time.Time // the SDK's first "SSE stream disconnected"
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Event string          `json:"event"`
			Dir   string          `json:"dir"`
			Data  json.RawMessage `json:"data"`
			Phase string          `json:"phase"`
			Code  json.RawMessage `json:"code"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		now := time.Now()
		switch {
		case ev.Event == "wire" && ev.Dir == "out" && len(ev.Data) > 0:
			w.out(ev.Data, now)
		case ev.Event == "wire" && ev.Dir == "in" && len(ev.Data) > 0:
			w.in(ev.Data, now)
		case ev.Event == "cancel_sent" && c != nil:
			w.mark(func() { c.CancelSent = now })
			wl.cancels.Add(1)
		case ev.Event == "sdk_error" && streamLost.IsZero():
			// The v2 SDK reports a response stream cut under it (its
			// gateway killed) here, and leaves the call pending until its
			// own timeout: the transport broke now, not then.
			streamLost = now
		case ev.Event == "error" && ev.Phase == "call" && c != nil:
			w.mark(func() {
				if string(ev.Code) == "-32001" && c.CancelSent.IsZero() && !lostFirst(c, streamLost) {
					c.CancelSent, c.TimedOut = now, true // the SDK's own timeout cancels
				}
			})
			callErr = true
		}
	}
	cmd.Wait()
	if c != nil && callErr {
		w.mark(func() {
			if len(c.Responses) == 0 && c.CancelSent.IsZero() {
				c.Broken = time.Now()
				if lostFirst(c, streamLost) {
					c.Broken = streamLost
				}
			}
		})
	}
}
