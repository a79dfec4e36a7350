package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// protocol2025 is the sessionful revision the throughput and stdio runs
// speak; protocol2026 the stateless one.
const (
	protocol2025 = "2025-11-25"
	protocol2026 = "2026-07-28"
)

// benchHTTPClient keeps enough idle connections for every concurrent
// client, so neither server pays for reconnects.
func benchHTTPClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost, t.MaxConnsPerHost = 2*conns, 2*conns, 0
	return &http.Client{Transport: t}
}

// echoLoad is clients Go SDK sessions on one server, ready to call echo.
type echoLoad struct {
	sessions []*mcp.ClientSession
	call     callFunc
	calls    int64
	elapsed  time.Duration
}

// callFunc makes one call on a session and checks its answer.
type callFunc func(context.Context, *mcp.ClientSession) error

func newEchoLoad(ctx context.Context, url string, hc *http.Client, clients int) (*echoLoad, error) {
	return newLoad(ctx, url, hc, clients, echo)
}

func newLoad(ctx context.Context, url string, hc *http.Client, clients int, call callFunc) (*echoLoad, error) {
	l := &echoLoad{call: call}
	for range clients {
		cs, err := httpSession(ctx, url, protocol2025, hc)
		if err != nil {
			l.close()
			return nil, err
		}
		l.sessions = append(l.sessions, cs)
		if err := call(ctx, cs); err != nil { // warm up the session and its connection
			l.close()
			return nil, err
		}
	}
	return l, nil
}

func (l *echoLoad) close() {
	for _, cs := range l.sessions {
		cs.Close()
	}
}

func (l *echoLoad) rate() float64 {
	if l.elapsed == 0 {
		return 0
	}
	return float64(l.calls) / l.elapsed.Seconds()
}

// run has every session call echo in a loop for d. A call that fails or
// returns anything but the text fails the run: a benchmark of errors is
// not one.
func (l *echoLoad) run(ctx context.Context, d time.Duration) error {
	var n atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for _, cs := range l.sessions {
		wg.Go(func() {
			for time.Now().Before(deadline) && first.Load() == nil {
				if err := l.call(ctx, cs); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	l.elapsed += time.Since(start)
	l.calls += n.Load()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}

// throughputSlice is how long one server is loaded before the other's
// turn: alternating keeps a change in the machine's other load from
// landing on one side of the comparison only.
const throughputSlice = time.Second

// echoRates loads a and b in alternating slices until each had window,
// and returns each one's calls per second.
func echoRates(ctx context.Context, a, b *echoLoad, window time.Duration) (float64, float64, error) {
	for done := time.Duration(0); done < window; done += throughputSlice {
		d := min(throughputSlice, window-done)
		if err := a.run(ctx, d); err != nil {
			return 0, 0, err
		}
		if err := b.run(ctx, d); err != nil {
			return 0, 0, err
		}
	}
	return a.rate(), b.rate(), nil
}

func echo(ctx context.Context, cs *mcp.ClientSession) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if res.IsError {
		return errors.New("echo: the tool returned isError")
	}
	if len(res.Content) != 1 {
		return fmt.Errorf("echo: %d content items, want 1", len(res.Content))
	}
	if t, ok := res.Content[0].(*mcp.TextContent); !ok || t.Text != "hello" {
		return fmt.Errorf("echo: got %#v, want the text hello", res.Content[0])
	}
	return nil
}

// plainServer serves the same echo tool from a plain Go SDK server over
// Streamable HTTP on loopback: no coordinator, no etcd, no worker hop.
type plainServer struct {
	url  string
	srv  *http.Server
	done chan struct{}
}

type echoIn struct {
	Text string `json:"text" jsonschema:"The text to return."`
}

func startPlain() (*plainServer, error) {
	s := mcp.NewServer(&mcp.Implementation{Name: "plain-echo", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns the given text unchanged."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	p := &plainServer{url: "http://" + lis.Addr().String() + "/mcp", srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() { defer close(p.done); p.srv.Serve(lis) }()
	return p, nil
}

func (p *plainServer) close() { p.srv.Close(); <-p.done }
