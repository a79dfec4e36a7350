//go:build unix

package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/worker"
)

// TestMain checks for leaks; the examples run an embedded etcd, whose
// server lingers for a moment after Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks()...) }

// TestCommandKillsTheGroup starts a shell with a background grandchild,
// cancels, and checks that Wait returns promptly and the grandchild died
// with the shell.
func TestCommandKillsTheGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := worker.Command(ctx, "sh", "-c", "sleep 60 & echo $!; sleep 60; wait")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	grandchild := readPID(t, stdout)

	cancel()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err == nil {
			t.Error("Wait returned nil after the command was killed")
		}
	case <-time.After(worker.CommandWaitDelay + 3*time.Second):
		t.Fatal("Wait did not return after cancel")
	}
	waitGone(t, grandchild, 5*time.Second)
}

func readPID(t *testing.T, r io.Reader) int {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the grandchild's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		t.Fatalf("bad pid line %q", line)
	}
	return pid
}

// waitGone polls until pid no longer runs, failing after limit.
func waitGone(t *testing.T, pid int, limit time.Duration) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for !gone(pid) {
		select {
		case <-tick.C:
		case <-deadline:
			syscall.Kill(pid, syscall.SIGKILL) // do not leave it behind
			t.Fatalf("grandchild %d still running %v after the cancel", pid, limit)
		}
	}
}

// gone says whether pid has exited: it no longer exists, or it is a zombie
// waiting for a parent (init, here) that may never reap it.
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func TestCommandRunsNormally(t *testing.T) {
	out, err := worker.Command(t.Context(), "sh", "-c", "echo out; echo err >&2; exit 3").Output()
	var exit interface{ ExitCode() int }
	if string(out) != "out\n" || !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Output = %q, %v; want %q and exit status 3", out, err, "out\n")
	}
}

func ExampleCommand() {
	handler := func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		// When the call is cancelled, the shell and its sleep both die.
		out, err := worker.Command(ctx, "sh", "-c", "sleep 0.01; echo done").Output()
		if err != nil {
			return nil, err
		}
		return worker.Text(string(out)), nil
	}
	res, err := handler(context.Background(), &worker.Call{Tool: "run"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Content[0].(*mcp.TextContent).Text)
	// Output: done
}
