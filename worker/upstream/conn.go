package upstream

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
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
			return nil, fmt.Errorf("connecting to %s: %w", a.opts.URL, err)
		}
		a.log.Info("connected to the upstream MCP server", "protocol", sess.InitializeResult().ProtocolVersion)
		return &conn{sess: sess}, nil
	}
	cmd := a.command()
	t := taskTransport{inWireOrder{Transport: &mcp.CommandTransport{Command: cmd, TerminateDuration: a.opts.TerminateWait}, progress: a.tokens.relay}, &a.taskSupport}
	sess, err := client.Connect(ctx, t, nil)
	if err != nil {
		if cmd.Process != nil && cmd.ProcessState == nil {
			killGroup(cmd.Process.Pid)
			cmd.Wait()
		}
		return nil, fmt.Errorf("starting %s: %w", a.opts.Command[0], err)
	}
	a.log.Info("started the upstream MCP server", "pid", cmd.Process.Pid, "protocol", sess.InitializeResult().ProtocolVersion)
	return &conn{sess: sess, cmd: cmd, pid: cmd.Process.Pid}, nil
}

// command is the child process: in a process group of its own, its
// stderr logged line by line.
func (a *Adapter) command() *exec.Cmd {
	cmd := exec.Command(a.opts.Command[0], a.opts.Command[1:]...)
	cmd.Dir = a.opts.Dir
	cmd.Env = append(os.Environ(), a.opts.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = &lineLog{log: a.log}
	return cmd
}

// close ends the session: over stdio it closes the child's stdin, waits
// TerminateWait for it to exit (then signals it), and kills whatever is
// left of its process group. Idempotent.
func (c *conn) close() error {
	c.once.Do(func() {
		c.closeErr = c.sess.Close()
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

// lineLog logs what the child writes to stderr, one record per line.
type lineLog struct {
	log *slog.Logger

	mu  sync.Mutex
	buf []byte
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
}
