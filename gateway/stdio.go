package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// lineSink writes newline-delimited JSON, one message at a time.
type lineSink struct {
	mu     sync.Mutex
	w      io.Writer
	broken bool
}

func (l *lineSink) send(msg []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken {
		return false
	}
	if _, err := l.w.Write(append(msg, '\n')); err != nil {
		l.broken = true
		return false
	}
	return true
}

// close stops all writes.
func (l *lineSink) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.broken = true
}

// ServeStdio serves one client speaking MCP over r and w (newline-delimited
// JSON-RPC) until r ends or ctx is done. Then the connection's calls still
// in flight are cancelled (reason: the connection closed) and ServeStdio
// returns once they have settled.
func (g *Gateway) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	s := newSession(g, "conn:"+randomToken(12), anonymous)
	out := &lineSink{w: w}
	s.setNotifier(out)
	defer out.close()
	defer s.setNotifier(nil)
	var calls sync.WaitGroup
	defer calls.Wait()
	defer s.cancelAll(pb.Initiator_INITIATOR_DISCONNECT, "stdio connection closed")
	pingCtx, stopPing := context.WithCancel(ctx)
	defer stopPing()
	calls.Go(func() { s.pingLoop(pingCtx, g.opts.PingInterval) })

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	// The reader ends when r does; a blocked Read cannot be interrupted, so
	// on ctx it is left to end with r (the caller closes r).
	go func() { readErr <- readLines(r, g.opts.MaxMessageBytes, lines, stop) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case line := <-lines:
			g.serveLine(ctx, s, out, line, &calls)
		}
	}
}

func (g *Gateway) serveLine(ctx context.Context, s *session, out sink, line []byte, calls *sync.WaitGroup) {
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	if line == nil {
		out.send(jsonrpc.ErrorResponse(jsonrpc.ID{}, false, jsonrpc.Errorf(jsonrpc.CodeParseError, "message larger than %d bytes", g.opts.MaxMessageBytes)))
		return
	}
	m, derr := jsonrpc.Decode(line)
	if derr != nil {
		out.send(jsonrpc.ErrorResponse(derr.ID, derr.HasID, derr.Error))
		return
	}
	if m.Kind == jsonrpc.KindRequest && m.Method == "tools/call" {
		calls.Go(func() { s.handle(ctx, m, out) })
		return
	}
	s.handle(ctx, m, out)
}

// readLines sends each line of r on out until r ends. A line longer than
// max is sent as nil, so the caller can answer it, and skipped.
func readLines(r io.Reader, max int64, out chan<- []byte, stop <-chan struct{}) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, max)
		if line != nil || errors.Is(err, errLineTooLong) {
			select {
			case out <- line:
			case <-stop:
				return nil
			}
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			return err
		}
	}
}

var errLineTooLong = errors.New("gateway: line too long")

func readLine(br *bufio.Reader, max int64) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if int64(len(buf)+len(chunk)) > max {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return nil, err
			}
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				return buf, nil
			}
			return nil, err
		}
		return buf, nil
	}
}

// anonymous is the principal of unauthenticated clients.
const anonymous = "anonymous"
