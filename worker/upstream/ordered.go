package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// inWireOrder wraps a stdio transport so that the adapter relays each
// progress notification from the connection's read loop, in the order it
// arrived. The SDK hands a response to its caller as soon as it is read
// but queues notifications for a handler goroutine, so progress the server
// sent just before its result could otherwise reach the relay after the
// call returned and its route closed: the client's progress bar would end
// short of its total.
//
// Only transports whose connections have no hooks of their own may be
// wrapped: the SDK's streamable HTTP connection has an unexported one
// (it learns the negotiated version) that a wrapper would hide; over
// HTTP, tapProgress does the same job in the HTTP client.
type inWireOrder struct {
	mcp.Transport
	progress func(*mcp.ProgressNotificationParams)
}

func (t inWireOrder) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &orderedConn{Connection: c, progress: t.progress}, nil
}

type orderedConn struct {
	mcp.Connection
	progress func(*mcp.ProgressNotificationParams)
}

// Read relays a progress notification before returning it, so it is
// relayed before any message read after it is seen by anyone.
func (c *orderedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if req, ok := m.(*jsonrpc.Request); ok && !req.IsCall() && req.Method == "notifications/progress" {
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(req.Params, &p) == nil {
			c.progress(&p)
		}
	}
	return m, err
}

// tapProgress returns a copy of hc whose event-stream response bodies
// relay each progress notification as the SDK reads its bytes, and so
// before the SDK sees anything that follows it on the wire. It does for
// streamable HTTP what inWireOrder does for stdio, at the one layer the
// SDK leaves open (its HTTP client).
//
// With callLogs it also hands the log messages on a request's response
// stream to the call whose context made the request (relayFrom).
func tapProgress(hc *http.Client, progress func(*mcp.ProgressNotificationParams), callLogs bool) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	c := *hc
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = forgiveCancels(progressTap{base: base, progress: progress, callLogs: callLogs}) // cancels.go
	return &c
}

type progressTap struct {
	base     http.RoundTripper
	progress func(*mcp.ProgressNotificationParams)
	callLogs bool
}

func (t progressTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		tap := &sseTap{ReadCloser: resp.Body, progress: t.progress}
		if r := relayFrom(req.Context()); t.callLogs && r != nil {
			tap.log = r.log
		}
		resp.Body = tap
	}
	return resp, err
}

// maxTappedEvent bounds the data of an event the tap looks into: progress
// is small; anything larger (a result) passes by unread.
const maxTappedEvent = 64 << 10

// sseTap reads Server-Sent Events alongside their reader, line by line.
type sseTap struct {
	io.ReadCloser
	progress func(*mcp.ProgressNotificationParams)
	log      func(*mcp.LoggingMessageParams) // nil: logs are not the call's
	line     []byte                          // the line being read
	data     []byte                          // the event's data so far
	skip     bool                            // the event is too large to be progress
}

func (s *sseTap) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	for b := p[:n]; len(b) > 0; {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b)
			break
		}
		s.add(b[:i])
		s.endLine()
		b = b[i+1:]
	}
	return n, err
}

func (s *sseTap) add(b []byte) {
	if len(s.line)+len(b) > maxTappedEvent {
		s.skip, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, b...)
}

func (s *sseTap) endLine() {
	line := bytes.TrimSuffix(s.line, []byte{'\r'})
	switch {
	case len(line) == 0: // the event is complete
		if !s.skip {
			s.dispatch()
		}
		s.data, s.skip = s.data[:0], false
	case !s.skip:
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(s.data) > 0 {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, bytes.TrimPrefix(v, []byte(" "))...)
			s.skip = len(s.data) > maxTappedEvent
		}
	}
	s.line = s.line[:0]
}

func (s *sseTap) dispatch() {
	if s.log != nil && bytes.Contains(s.data, []byte(`"notifications/message"`)) {
		s.dispatchLog()
		return
	}
	if !bytes.Contains(s.data, []byte(`"notifications/progress"`)) {
		return
	}
	var m struct {
		ID     json.RawMessage                 `json:"id"`
		Method string                          `json:"method"`
		Params *mcp.ProgressNotificationParams `json:"params"`
	}
	if json.Unmarshal(s.data, &m) == nil && m.ID == nil && m.Method == "notifications/progress" && m.Params != nil {
		s.progress(m.Params)
	}
}

func (s *sseTap) dispatchLog() {
	var m struct {
		ID     json.RawMessage           `json:"id"`
		Method string                    `json:"method"`
		Params *mcp.LoggingMessageParams `json:"params"`
	}
	if json.Unmarshal(s.data, &m) == nil && m.ID == nil && m.Method == "notifications/message" && m.Params != nil {
		s.log(m.Params)
	}
}
