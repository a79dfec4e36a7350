package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// privateTmp is a TMPDIR of the test's own, as an environment entry, so
// that what a dev leaves there is the test's to see.
func privateTmp(t *testing.T) (dir, env string) {
	dir = t.TempDir()
	return dir, "TMPDIR=" + dir
}

// noDevData fails unless dev left no mcpcancel-dev-* directory in tmp.
func noDevData(t *testing.T, tmp string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(tmp, "mcpcancel-dev-*"))
	if err != nil || len(left) > 0 {
		t.Errorf("dev left its temporary data behind: %v %v", left, err)
	}
}

// TestDevUpstreamFailsFast: an upstream server that cannot start, that
// exits before it answers initialize, or that never answers it, ends
// dev within seconds with an error naming the command and quoting its
// stderr; dev never says "mcp:" and leaves no temporary data.
func TestDevUpstreamFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name     string
		upstream []string
		code     int
		want     []string
	}{
		{"no such command", []string{"--upstream-stdio", "mcpcancel-no-such-server --flag"}, 2,
			[]string{`mcpcancel dev: --upstream-stdio: exec: "mcpcancel-no-such-server": executable file not found`}},
		{"exits before initialize", []string{"--upstream-stdio", `sh -c 'echo cannot open the database >&2; exit 3'`}, 1,
			[]string{"the upstream MCP server did not start: starting sh: it exited (exit status 3) before answering initialize", "cannot open the database"}},
		{"never answers initialize", []string{"--upstream-connect-timeout", "5s", "--upstream-stdio", `sh -c 'echo listening on a socket instead >&2; exec sleep 60'`}, 1,
			[]string{
				"waiting for the upstream MCP server (sh -c 'echo listening on a socket instead >&2; exec sleep 60') to answer initialize, up to 5s (--upstream-connect-timeout)",
				"starting sh: no answer to initialize within 5s", "listening on a socket instead",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp, env := privateTmp(t)
			p := start(t, []string{env}, append([]string{"dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0"}, tc.upstream...)...)
			if code := p.exitCode(t); code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			stderr := p.stderr()
			inOrder(t, "stderr", stderr, tc.want)
			if strings.Contains(stderr, "\nmcp: ") {
				t.Errorf("dev served MCP with no upstream server")
			}
			noDevData(t, tmp)
			if t.Failed() {
				t.Logf("stderr:\n%s", stderr)
			}
		})
	}
}

// TestDevPortsInUse: every address dev cannot have is named at once,
// before anything starts.
func TestDevPortsInUse(t *testing.T) {
	held := func() string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
		return lis.Addr().String()
	}
	http, coord, console := held(), held(), held()
	tmp, env := privateTmp(t)
	p := start(t, []string{env}, "dev", "--http", http, "--coordinator-listen", coord, "--console-listen", console)
	if code := p.exitCode(t); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	stderr := p.stderr()
	inOrder(t, "stderr", stderr, []string{
		"mcpcancel dev: 3 addresses are in use",
		http + " (--http)", coord + " (--coordinator-listen)", console + " (--console-listen)",
		"or port 0 for a free one",
	})
	if strings.Contains(stderr, "etcd: ") {
		t.Errorf("dev started etcd before finding its addresses taken")
	}
	noDevData(t, tmp)
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// TestDevSignalTwice: the first SIGINT says what the stop waits for (the
// call in flight, up to dev's short grace); the second exits at once
// with 130 and still removes dev's temporary data directory.
func TestDevSignalTwice(t *testing.T) {
	tmp, env := privateTmp(t)
	p := start(t, []string{env}, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	coordAddr := p.waitLine(t, "coordinator: ")
	url := p.waitLine(t, "mcp: ")
	c := mcp.NewClient(&mcp.Implementation{Name: "dev-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	called := make(chan error, 1)
	go func() { // waited for below: it ends when dev exits
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 600}})
		called <- err
	}()
	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	poll(t, "the call to run", func() bool {
		resp, err := client.ListWorkers(t.Context(), &pb.ListWorkersRequest{})
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 1
	})

	p.signal(t, syscall.SIGINT)
	note := p.waitLine(t, "mcpcancel: interrupt: ")
	if want := "shutting down and waiting up to 5s for 1 call in flight to finish, then cancelling it; signal again to exit at once"; note != want {
		t.Errorf("the first signal said %q, want %q", note, want)
	}
	p.signal(t, syscall.SIGINT)
	if code := p.exitCode(t); code != 130 {
		t.Errorf("exit status %d after a second SIGINT, want 130", code)
	}
	<-called
	noDevData(t, tmp)
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		t.Logf("left in TMPDIR: %v", entries)
	}
}

// TestDevHangUp: a closed terminal (SIGHUP) stops dev as SIGTERM does:
// status 0, and no temporary data left behind.
func TestDevHangUp(t *testing.T) {
	tmp, env := privateTmp(t)
	p := start(t, []string{env}, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	p.waitLine(t, "mcp: ")
	p.signal(t, syscall.SIGHUP)
	if code := p.exitCode(t); code != 0 {
		t.Errorf("exit status %d after SIGHUP, want 0", code)
	}
	if note := p.waitLine(t, "mcpcancel: hangup: "); note != "shutting down (no calls in flight); signal again to exit at once" {
		t.Errorf("SIGHUP said %q", note)
	}
	noDevData(t, tmp)
}

// TestDevInterruptedWhileStarting: SIGINT while dev waits for its
// upstream server stops it quietly, with status 0, not "context canceled".
func TestDevInterruptedWhileStarting(t *testing.T) {
	tmp, env := privateTmp(t)
	p := start(t, []string{env}, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0",
		"--upstream-connect-timeout", "1m", "--upstream-stdio", "sh -c 'exec sleep 60'")
	p.waitLine(t, "coordinator: ")
	p.signal(t, syscall.SIGINT)
	if code := p.exitCode(t); code != 0 {
		t.Errorf("exit status %d after SIGINT while starting, want 0", code)
	}
	if stderr := p.stderr(); strings.Contains(stderr, "context canceled") {
		t.Errorf("dev said %q", stderr)
	}
	noDevData(t, tmp)
}
