package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// TestDevOverHTTP runs `mcpcancel dev`, talks MCP to it with the Go SDK
// client, cancels a call and finds it audited, then stops it with SIGTERM:
// it exits 0 and removes its temporary data directory.
func TestDevOverHTTP(t *testing.T) {
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0")
	etcdLine := p.waitLine(t, "etcd: ")
	coordAddr := p.waitLine(t, "coordinator: ")
	url := p.waitLine(t, "mcp: ")
	dataDir := strings.TrimSuffix(etcdLine[strings.Index(etcdLine, "(data in ")+len("(data in "):], ")")

	c := mcp.NewClient(&mcp.Implementation{Name: "dev-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "hi" {
		t.Fatalf("echo = %v, %v", res, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	progressed := make(chan struct{}, 1)
	c2 := mcp.NewClient(&mcp.Implementation{Name: "dev-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		},
	})
	cs2, err := c2.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 30, "steps": 300}}
	params.SetProgressToken("p")
	go func() { _, err := cs2.CallTool(ctx, params); errc <- err }()
	<-progressed
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("sleep = %v", err)
	}
	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	poll(t, "the cancelled record", func() bool {
		resp, err := client.ListAudit(t.Context(), &pb.ListAuditRequest{Outcome: "cancelled"})
		return err == nil && len(resp.Records) == 1 && resp.Records[0].Tool == "sleep"
	})
	cs.Close()
	cs2.Close()
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM", code)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir %s left behind: %v", dataDir, err)
	}
}

// TestDevOverStdio speaks MCP to `mcpcancel dev --stdio` on its stdin and
// stdout with the Go SDK's command transport; logs stay on stderr.
func TestDevOverStdio(t *testing.T) {
	cmd := command("dev", "--stdio", "--coordinator-listen", "127.0.0.1:0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "dev-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect: %v\nstderr:\n%s", err, stderr.String())
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over stdio"}})
	if err != nil || res.Content[0].(*mcp.TextContent).Text != "over stdio" {
		t.Fatalf("echo = %v, %v\nstderr:\n%s", res, err, stderr.String())
	}
	if err := cs.Close(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("close: %v", err)
		}
	}
	if !strings.Contains(stderr.String(), "coordinator: ") {
		t.Fatalf("endpoint lines missing from stderr:\n%s", stderr.String())
	}
}

// TestDevShutdownWithCallsInFlight: SIGTERM with a long call in flight;
// after --shutdown-grace the call is cancelled, its client answered with
// an error saying so, and dev exits 0 promptly.
func TestDevShutdownWithCallsInFlight(t *testing.T) {
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--shutdown-grace", "300ms")
	coordAddr := p.waitLine(t, "coordinator: ")
	url := p.waitLine(t, "mcp: ")
	c := mcp.NewClient(&mcp.Implementation{Name: "dev-test", Version: "1"}, nil)
	// No standalone GET stream: with MaxRetries -1 the SDK fails every
	// pending call as soon as that stream ends at shutdown, even when the
	// call's answer has already arrived on its own POST stream, which is
	// what this test reads.
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	started := make(chan struct{})
	go func() {
		params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 60, "steps": 600}}
		close(started)
		res, err := cs.CallTool(t.Context(), params)
		done <- outcome{res, err}
	}()
	<-started
	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	poll(t, "the call to run", func() bool {
		resp, err := client.ListWorkers(t.Context(), &pb.ListWorkersRequest{})
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 1
	})
	begun := time.Now()
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM", code)
	}
	if took := time.Since(begun); took > 8*time.Second {
		t.Fatalf("shutdown took %v with a 300ms grace", took)
	}
	// Its client did not cancel and is still waiting: it is told why the
	// call ended (docs/design.md §2: anyone else's cancel is answered).
	o := <-done
	if o.err != nil || !o.res.IsError || len(o.res.Content) == 0 || !strings.Contains(o.res.Content[0].(*mcp.TextContent).Text, "shut down") {
		t.Fatalf("the client of a call cancelled by shutdown got %+v, %v; want an error result naming the shutdown", o.res, o.err)
	}
}

// TestDevStdioSideBySide: MCP hosts start one `dev --stdio` per client.
// With the default coordinator port held (as the tour's `mcpcancel dev`
// holds it), two of them run at once, each on a free port it prints, and
// each serves a call from the Go SDK client over its stdin and stdout.
func TestDevStdioSideBySide(t *testing.T) {
	if held, err := net.Listen("tcp", defaultCoordinator); err == nil {
		defer held.Close() // else something else (a running dev) holds it already
	}
	type dev struct {
		cs     *mcp.ClientSession
		stderr *syncBuffer
	}
	var devs []dev
	for i := range 2 {
		cmd := command("dev", "--stdio")
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		c := mcp.NewClient(&mcp.Implementation{Name: "dev-test", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("dev %d: connect: %v\nstderr:\n%s", i, err, stderr)
		}
		devs = append(devs, dev{cs, stderr})
	}
	coords := map[string]bool{}
	for i, d := range devs {
		text := fmt.Sprintf("from dev %d", i)
		res, err := d.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
		if err != nil || res.Content[0].(*mcp.TextContent).Text != text {
			t.Fatalf("dev %d: echo = %v, %v\nstderr:\n%s", i, res, err, d.stderr)
		}
		var addr string // printed before MCP is served; the copier may lag
		poll(t, "the coordinator line", func() bool { addr = lineAfter(d.stderr.String(), "coordinator: "); return addr != "" })
		if addr == defaultCoordinator {
			t.Errorf("dev %d: coordinator on %q, want a free port\nstderr:\n%s", i, addr, d.stderr)
		}
		coords[addr] = true
	}
	if len(coords) != 2 {
		t.Errorf("the two devs share a coordinator address: %v", coords)
	}
	for i, d := range devs {
		if err := d.cs.Close(); err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Errorf("dev %d: close: %v", i, err)
			}
		}
	}
}

// defaultCoordinator is the coordinator's default address: `coordinator
// --listen`'s, and where `mcpcancel dev` puts it.
const defaultCoordinator = "127.0.0.1:7801"

// lineAfter returns the rest of the first line of s starting with prefix.
func lineAfter(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return rest
		}
	}
	return ""
}

// syncBuffer is a strings.Builder that a child's stderr copier writes
// while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
