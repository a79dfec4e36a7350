package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// lineWriter writes newline-delimited JSON, a batch in one Write, within
// the deadline where the stream supports one (pipes and sockets do; a
// blocked Write on anything else is abandoned at the deadline and ends
// when the stream is closed).
type lineWriter struct{ w io.Writer }

func (l lineWriter) write(batch [][]byte, deadline time.Time) error {
	if d, ok := l.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		d.SetWriteDeadline(deadline)
	}
	n := 0
	for _, msg := range batch {
		n += len(msg) + 1
	}
	buf := make([]byte, 0, n) // a message may be shared (a broadcast): never append to it
	for _, msg := range batch {
		buf = append(append(buf, msg...), '\n')
	}
	_, err := l.w.Write(buf)
	return err
}

func (lineWriter) abandonable() bool { return true }

// ServeStdio serves one client speaking MCP over r and w (newline-delimited
// JSON-RPC) until r ends or ctx is done. Then the connection's calls still
// in flight are cancelled (reason: the connection closed) and ServeStdio
// returns once they have settled.
func (g *Gateway) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	s := newSession(g, client.ConnScope+randid.New(12), auth.Anonymous)
	out := newOutbox(lineWriter{w}, g.opts.WriteTimeout, g.outboxLimit())
	s.setNotifier(out)
	defer out.close()
	defer s.setNotifier(nil)
	var calls sync.WaitGroup
	defer calls.Wait()
	// On EOF, or once the client stops reading, the client has left; on
	// ctx (the gateway stopping) it still waits, and is answered.
	left, reason := false, "stdio connection closed"
	defer func() {
		if left {
			s.setLeft(true)
			s.cancelAll(pb.Initiator_INITIATOR_DISCONNECT, reason)
			s.announceEnd(reason)
		} else {
			s.cancelAll(pb.Initiator_INITIATOR_SHUTDOWN, "the gateway is shutting down")
		}
		s.closeListens(!left) // 2026-07-28 listens and their subscriptions (stdio20260728.go)
	}()
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
		case <-out.cut:
			left, reason = true, "the client stopped reading stdout"
			g.log.Warn("cutting off a stdio client that stopped reading", "scope", s.scope, "err", out.err())
			return nil
		case err := <-readErr:
			left = true
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
	parse(m) // once, for every layer below
	switch {
	case m.Kind == jsonrpc.KindRequest && !ordersSession(m.Method):
		// No request waits for another: a long poll (tasks/result) must not
		// hold up a ping, a call or a cancel behind it.
		s.arrive(m.ID)
		calls.Go(func() {
			defer s.forgetArrival(m.ID)
			s.handle(ctx, m, out)
		})
	case m.Kind == jsonrpc.KindNotification && m.Method == "notifications/cancelled":
		// The gate flips here, in order with the lines around it; the
		// coordinator hears of it off the read loop.
		s.clientCancelled(m.Params, calls.Go, calls.Go)
	default:
		s.handle(ctx, m, out)
	}
}

// ordersSession says whether a request changes what the requests after it
// see, and so is served in the read loop, in order: initialize,
// logging/setLevel (the level a later call starts with) and
// subscriptions/listen (which a later cancel may name). Each is local and
// quick.
func ordersSession(method string) bool {
	switch method {
	case "initialize", "logging/setLevel", "subscriptions/listen":
		return true
	}
	return false
}

// readLines sends each line of r on out until r ends. A line longer than
// max is sent as nil, so the caller can answer it, and skipped.
func readLines(r io.Reader, max int64, out chan<- []byte, stop <-chan struct{}) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := jsonrpc.ReadLine(br, max)
		if line != nil || errors.Is(err, jsonrpc.ErrLineTooLong) {
			select {
			case out <- line:
			case <-stop:
				return nil
			}
		}
		if err != nil && !errors.Is(err, jsonrpc.ErrLineTooLong) {
			return err
		}
	}
}
