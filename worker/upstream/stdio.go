package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	ijsonrpc "github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// stdioTransport runs the server's command and speaks MCP to it over the
// child's stdin and stdout, one message a line, as the SDK's
// CommandTransport does, and closes it the same way. It differs in how it
// reads: the SDK's stdio connection decodes every message three times
// (as a batch, as a message, its method), each with a fresh 32 KiB
// buffer, which was most of what the adapter allocated per call. This one
// decodes each line once, with the standard library, by the SDK's rules.
type stdioTransport struct {
	cmd           *exec.Cmd
	terminateWait time.Duration
}

// maxLine bounds one message from the server, as the SDK's
// DefaultMaxLineLength does.
const maxLine = mcp.DefaultMaxLineLength

func (t stdioTransport) Connect(context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	c := &stdioConn{cmd: t.cmd, stdin: stdin, terminateWait: t.terminateWait, lines: make(chan lineOrErr), closed: make(chan struct{})}
	// owned by c: it ends at the child's stdout's end (cmd.Wait, in
	// Close, closes it once the child exited) or once Close closed c.closed.
	go c.readLines(stdout)
	return c, nil
}

// stdioConn is one child's connection.
type stdioConn struct {
	cmd           *exec.Cmd
	stdin         io.WriteCloser
	terminateWait time.Duration
	lines         chan lineOrErr
	closed        chan struct{}

	queue []jsonrpc.Message // the rest of a batch; only Read touches it

	writeMu sync.Mutex

	closeOnce sync.Once
	closeErr  error
}

type lineOrErr struct {
	line []byte
	err  error
}

// readLines hands each line the child writes to Read.
func (c *stdioConn) readLines(stdout io.Reader) {
	br := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := readLine(br)
		if len(line) == 0 && err == nil {
			continue // a blank line
		}
		select {
		case c.lines <- lineOrErr{line, err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line, without its end; at most maxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := ijsonrpc.ReadLine(br, maxLine+2) // with its end, \r\n
	if errors.Is(err, ijsonrpc.ErrLineTooLong) {
		return nil, fmt.Errorf("a message from the server is longer than %d bytes", maxLine)
	}
	return bytes.TrimRight(line, "\r\n"), err
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(c.queue) > 0 {
		m := c.queue[0]
		c.queue = c.queue[1:]
		return m, nil
	}
	var line []byte
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case l := <-c.lines:
		if l.err != nil {
			return nil, l.err
		}
		line = l.line
	case <-c.closed:
		return nil, io.EOF
	}
	if line = bytes.TrimSpace(line); len(line) > 0 && line[0] == '[' {
		// A batch, which servers of revisions before 2025-06-18 may send.
		var raws []json.RawMessage
		if err := json.Unmarshal(line, &raws); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc batch: %w", err)
		}
		if len(raws) == 0 {
			return nil, errors.New("empty batch")
		}
		for _, raw := range raws {
			m, err := decodeMessage(raw)
			if err != nil {
				return nil, err
			}
			c.queue = append(c.queue, m)
		}
		m := c.queue[0]
		c.queue = c.queue[1:]
		return m, nil
	}
	return decodeMessage(line)
}

// wireMessage is a JSON-RPC message as it is read.
type wireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      any             `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *jsonrpc.Error  `json:"error"`
}

// decodeMessage decodes one message by the rules of the SDK's
// jsonrpc.DecodeMessage: a version of "2.0"; a method makes a request
// (a notification without an id); without one it is a response, which
// needs an id. One difference: encoding/json matches keys regardless of
// case, where the SDK's decoder matches them exactly.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	if w.JSONRPC != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected %q", w.JSONRPC, "2.0")
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil, err
	}
	if w.Method != nil {
		return &jsonrpc.Request{ID: id, Method: *w.Method, Params: w.Params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("invalid request: a response without an id")
	}
	r := &jsonrpc.Response{ID: id, Result: w.Result}
	if w.Error != nil { // not a typed nil
		r.Error = w.Error
	}
	return r, nil
}

func (c *stdioConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		return err
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err = c.stdin.Write(append(data, '\n'))
	return err
}

// Close closes the child's stdin, as the specification has a client end
// a stdio session, and waits terminateWait for it to exit; then signals
// it SIGTERM, and after as long again SIGKILL.
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.stop()
		close(c.closed)
	})
	return c.closeErr
}

func (c *stdioConn) stop() error {
	if err := c.stdin.Close(); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }() // owned: ends as the child does; SIGKILL below bounds that
	wait := func() (error, bool) {
		t := time.NewTimer(c.terminateWait)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if c.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := c.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the server's process did not exit after SIGKILL")
}

func (c *stdioConn) SessionID() string { return "" }
