package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testVersion is stamped into the binary the tests build.
const testVersion = "v0.0.0-clitest"

// binary is the mcpcancel binary built for these tests.
var binary string

// childTmp is the children's TMPDIR, removed with the binary: a test that
// kills `mcpcancel dev` leaves its temporary etcd data (over 100 MB) there
// rather than in the machine's /tmp.
var childTmp string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcpcancel-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := buildAndRun(m, dir)
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func buildAndRun(m *testing.M, dir string) int {
	binary = filepath.Join(dir, "mcpcancel")
	childTmp = filepath.Join(dir, "tmp")
	if err := os.Mkdir(childTmp, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	args := []string{"build", "-o", binary, "-ldflags", "-X github.com/mcpcancel/mcpcancel/internal/version.release=" + testVersion}
	if raceEnabled() {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/mcpcancel/mcpcancel/cmd/mcpcancel")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// raceEnabled says whether this test binary was built with -race, so the
// binary under test is built the same way.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// command runs the binary with this process's environment, less the race
// detector's one-second pause at exit, with TMPDIR in childTmp.
func command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "TMPDIR="+childTmp)
	return cmd
}

// proc is a running mcpcancel subprocess whose stderr is collected line by
// line.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process exited and stderr was read
	more   chan struct{} // a line was added (capacity 1)

	mu    sync.Mutex
	lines []string
}

// start runs the binary with args and env added to this process's
// environment; t's cleanup kills it if it still runs.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := command(args...)
	cmd.Env = append(cmd.Env, env...)
	return startCmd(t, cmd)
}

func (p *proc) collect(stderr io.Reader) {
	defer close(p.exited)
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		p.mu.Unlock()
		select {
		case p.more <- struct{}{}:
		default:
		}
	}
	p.cmd.Wait()
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

func (p *proc) linesFrom(i int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines[i:]...)
}

// waitLine waits for a stderr line starting with prefix and returns the
// rest of it.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for seen, exited := 0, false; ; {
		lines := p.linesFrom(seen)
		for _, l := range lines {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		}
		seen += len(lines)
		if exited {
			t.Fatalf("exited (%v) without printing %q", p.cmd.ProcessState, prefix)
		}
		select {
		case <-p.more:
		case <-p.exited:
			exited = true
		case <-deadline.C:
			t.Fatalf("no line %q within 20s", prefix)
		}
	}
}

// signal sends sig to the process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// exitCode waits for the process to exit and returns its status.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatalf("did not exit within 10s")
		return -1
	}
}
