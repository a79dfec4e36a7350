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

// echoRate runs clients Go SDK sessions against url, each calling echo in
// a loop for window, and returns completed calls per second. A call that
// fails or returns isError fails the run: a benchmark of errors is not
// one.
func echoRate(ctx context.Context, url string, hc *http.Client, clients int, window time.Duration) (float64, error) {
	sessions := make([]*mcp.ClientSession, clients)
	defer func() {
		for _, cs := range sessions {
			if cs != nil {
				cs.Close()
			}
		}
	}()
	for i := range sessions {
		cs, err := httpSession(ctx, url, protocol2025, hc)
		if err != nil {
			return 0, err
		}
		sessions[i] = cs
		if err := echo(ctx, cs); err != nil { // warm up the session and its connection
			return 0, err
		}
	}
	var n atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(window)
	for _, cs := range sessions {
		wg.Go(func() {
			for time.Now().Before(deadline) && first.Load() == nil {
				if err := echo(ctx, cs); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := first.Load(); e != nil {
		return 0, *e
	}
	return float64(n.Load()) / elapsed.Seconds(), nil
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
