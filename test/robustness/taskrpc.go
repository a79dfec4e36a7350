package robustness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// rpcSession is a 2025-11-25 MCP session over Streamable HTTP spoken as raw
// JSON-RPC: the Go SDK has no client side of tasks, so the task workload
// writes the messages itself, as the spec spells them.
type rpcSession struct {
	http    *http.Client
	url     string
	token   string
	id      string // Mcp-Session-Id
	nextID  atomic.Int64
	version string
}

// rpcReply is one JSON-RPC response.
type rpcReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errNoReply means the response never came: the transport failed, the
// gateway answered with an HTTP error, or the stream ended without it.
var errNoReply = errors.New("no JSON-RPC response")

// openRPC initializes a session on url as the principal of token.
func openRPC(ctx context.Context, hc *http.Client, url, token string) (*rpcSession, error) {
	s := &rpcSession{http: hc, url: url, token: token, version: "2025-11-25"}
	_, hdr, err := s.post(ctx, "initialize", map[string]any{
		"protocolVersion": s.version, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "robustness-tasks", "version": "0"},
	}, true)
	if err != nil {
		return nil, err
	}
	if s.id = hdr.Get("Mcp-Session-Id"); s.id == "" {
		return nil, fmt.Errorf("%w: initialize gave no Mcp-Session-Id", errNoReply)
	}
	if err := s.notify(ctx, "notifications/initialized"); err != nil {
		return nil, err
	}
	return s, nil
}

// call sends one request and returns its response.
func (s *rpcSession) call(ctx context.Context, method string, params any) (*rpcReply, error) {
	r, _, err := s.post(ctx, method, params, true)
	return r, err
}

func (s *rpcSession) notify(ctx context.Context, method string) error {
	_, _, err := s.post(ctx, method, nil, false)
	return err
}

// close ends the session (DELETE); errors are of no interest.
func (s *rpcSession) close(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
	if err != nil {
		return
	}
	s.headers(req)
	if resp, err := s.http.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (s *rpcSession) headers(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.id != "" {
		req.Header.Set("Mcp-Session-Id", s.id)
		req.Header.Set("MCP-Protocol-Version", s.version)
	}
}

// post sends a request (or, with !isCall, a notification) and reads its
// response from a JSON body or an event stream.
func (s *rpcSession) post(ctx context.Context, method string, params any, isCall bool) (*rpcReply, http.Header, error) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	id := s.nextID.Add(1)
	if isCall {
		msg["id"] = id
	}
	body, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	s.headers(req)
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errNoReply, err)
	}
	defer resp.Body.Close()
	if !isCall {
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode/100 != 2 {
			return nil, nil, fmt.Errorf("%w: %s: HTTP %d", errNoReply, method, resp.StatusCode)
		}
		return nil, resp.Header, nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, nil, fmt.Errorf("%w: %s: HTTP %d %s", errNoReply, method, resp.StatusCode, bytes.TrimSpace(b))
	}
	r, err := readReply(resp, id)
	return r, resp.Header, err
}

// readReply finds the response with id in a JSON body or an event stream.
func readReply(resp *http.Response, id int64) (*rpcReply, error) {
	want, _ := json.Marshal(id)
	match := func(b []byte) (*rpcReply, bool) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			rpcReply
		}
		if json.Unmarshal(b, &m) != nil || m.Method != "" || !bytes.Equal(bytes.TrimSpace(m.ID), want) {
			return nil, false
		}
		return &m.rpcReply, true
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errNoReply, err)
		}
		if r, ok := match(b); ok {
			return r, nil
		}
		return nil, fmt.Errorf("%w: body %.200s", errNoReply, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:")); ok {
			if r, ok := match(d); ok {
				return r, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: the event stream ended first (%v)", errNoReply, sc.Err())
}
