package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// conn is one connection to the server: a session, and for stdio the
// child process behind it.
type conn struct {
	sess *mcp.ClientSession
	cmd  *exec.Cmd // nil over HTTP
	pid  int
	// forget drops the session's events link, ending its requests
	// (events.go).
	forget func()

	once     sync.Once
	closeErr error
}

// dial starts the child (for Command) or connects over HTTP (for URL),
// and initializes an MCP session with it.
//
// With callLogs, the log messages the server sends on a request's response
// stream (HTTP) go to the call that made the request; the shared
// connection's do, as it belongs to no client session. A client
// session's own connection hands every log to its session instead.
func (a *Adapter) dial(ctx context.Context, client *mcp.Client, callLogs bool) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.ConnectWait)
	defer cancel()
	if a.opts.URL != "" {
		// Not wrapped in taskTransport: the SDK starts the session's
		// standalone GET stream (where a server sends what belongs to no
		// request: resource updates, logs outside a call) through a method
		// of its own connection type, which a wrapper hides. So a tool that
		// requires task augmentation is served over stdio only.
		t := &mcp.StreamableClientTransport{Endpoint: a.opts.URL, HTTPClient: tapProgress(a.opts.HTTPClient, a.tokens.relay, callLogs)}
		sess, err := client.Connect(ctx, t, nil)
		if err != nil {
			err = a.startErr(ctx, err, nil)
			a.start.fail(err)
			return nil, err
		}
		a.log.Info("connected to the upstream MCP server", "protocol", sess.InitializeResult().ProtocolVersion)
		eh := a.newEventsHTTP(sess) // events.go
		a.events.add(sess, eh)
		return &conn{sess: sess, forget: func() { a.events.remove(sess); eh.close() }}, nil
	}
	cmd, stderr := a.command()
	var ec *eventsConn
	t := eventsTransport{taskTransport{inWireOrder{Transport: stdioTransport{cmd: cmd, terminateWait: a.opts.TerminateWait}, progress: a.tokens.relay}, &a.taskSupport}, &ec}
	sess, err := client.Connect(ctx, t, nil)
	if err != nil {
		if cmd.Process != nil && cmd.ProcessState == nil {
			killGroup(cmd.Process.Pid)
			cmd.Wait() // and so the last of its stderr is read
		}
		// The connection closed because the child exited: say how it
		// ended rather than that the SDK read EOF.
		if status := exitedOnItsOwn(cmd); status != "" && ctx.Err() == nil && (errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF)) {
			err = fmt.Errorf("it exited (%s) before answering initialize", status)
		}
		err = a.startErr(ctx, err, stderr.tail())
		a.start.fail(err)
		return nil, err
	}
	a.log.Info("started the upstream MCP server", "pid", cmd.Process.Pid, "protocol", sess.InitializeResult().ProtocolVersion)
	a.events.add(sess, ec)
	return &conn{sess: sess, cmd: cmd, pid: cmd.Process.Pid, forget: func() { a.events.remove(sess) }}, nil
}

// command is the child process: in a process group of its own, its
// stderr logged line by line.
func (a *Adapter) command() (*exec.Cmd, *lineLog) {
	cmd := exec.Command(a.opts.Command[0], a.opts.Command[1:]...)
	cmd.Dir = a.opts.Dir
	cmd.Env = append(os.Environ(), a.opts.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr := &lineLog{log: a.log}
	cmd.Stderr = stderr
	return cmd, stderr
}

// startErr says why the server could not be started or connected to,
// for a user: the command (or URL), what went wrong (a wait for
// initialize past ConnectWait says so), and the last lines the command
// wrote to stderr.
func (a *Adapter) startErr(ctx context.Context, err error, stderr []string) error {
	what := "starting " + a.opts.Command[0]
	if a.opts.URL != "" {
		what = "connecting to " + a.opts.URL
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no answer to initialize within %v", a.opts.ConnectWait)
	}
	if len(stderr) == 0 {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w; the last it wrote to stderr:\n  %s", what, err, strings.Join(stderr, "\n  "))
}

// exitedOnItsOwn is how a reaped child ended, unless it was killed
// (by killGroup); "" if it was, or never ran.
func exitedOnItsOwn(cmd *exec.Cmd) string {
	ps := cmd.ProcessState
	if ps == nil {
		return ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return ""
	}
	return ps.String()
}

// WaitReady waits until the server's tools were first registered (nil), or
// until an attempt to start or connect to it failed before that (that
// attempt's error, naming the command or URL, with the last lines the
// command wrote to stderr), or until ctx is done. Run keeps retrying
// meanwhile: a caller that gives up on the error stops Run.
func (a *Adapter) WaitReady(ctx context.Context) error {
	select {
	case <-a.ready:
		return nil
	case <-a.start.failed():
		select {
		case <-a.ready:
			return nil
		default:
			return a.start.err()
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startFailure is the first failure to start or connect to the server,
// for WaitReady. Its zero value is ready to use.
type startFailure struct {
	mu    sync.Mutex
	first error         // guarded by mu
	done  chan struct{} // guarded by mu; closed once first is set
}

func (f *startFailure) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first != nil {
		return
	}
	f.first = err
	f.chanLocked()
	close(f.done)
}

func (f *startFailure) failed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.chanLocked()
}

func (f *startFailure) chanLocked() chan struct{} {
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

func (f *startFailure) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// close ends the session: over stdio it closes the child's stdin, waits
// TerminateWait for it to exit (then signals it), and kills whatever is
// left of its process group. Idempotent.
func (c *conn) close() error {
	c.once.Do(func() {
		c.closeErr = c.sess.Close()
		if c.forget != nil {
			c.forget()
		}
		if c.cmd != nil {
			killGroup(c.pid)
		}
	})
	return c.closeErr
}

// killGroup kills the process group that pid leads; a group already gone
// is no error.
func killGroup(pid int) {
	syscall.Kill(-pid, syscall.SIGKILL)
}

// maxLogLine bounds one logged line of the child's stderr.
const maxLogLine = 4096

// stderrTail is how many of the child's last stderr lines a failure to
// start it quotes.
const stderrTail = 8

// lineLog logs what the child writes to stderr, one record per line, and
// keeps the last stderrTail lines.
type lineLog struct {
	log *slog.Logger

	mu   sync.Mutex
	buf  []byte
	last []string // the last lines, oldest first
}

// tail is the last lines the child wrote, with any unterminated one.
func (l *lineLog) tail() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.last)
	if len(l.buf) > 0 {
		out = append(out, string(l.buf))
	}
	return out
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > maxLogLine {
		l.emit(l.buf)
		l.buf = nil
	}
	return len(p), nil
}

func (l *lineLog) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) > maxLogLine {
		line = line[:maxLogLine]
	}
	l.log.Info("upstream stderr", "line", string(line))
	if len(l.last) == stderrTail {
		l.last = l.last[1:]
	}
	l.last = append(l.last, string(line))
}
