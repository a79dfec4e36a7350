package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// httpEverything runs server-everything in Streamable HTTP mode and
// returns its URL.
func httpEverything(t testing.TB) string {
	t.Helper()
	script := everything(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := worker.Command(ctx, "node", script, "streamableHttp")
	cmd.Env = append(cmd.Environ(), "PORT="+port)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("server-everything output:\n%s", out.String()) // its writers are done: it exited
		}
	})
	testcluster.WaitFor(t, "server-everything's HTTP port", func() bool {
		select {
		case <-exited:
			t.Fatalf("server-everything exited: %v", cmd.ProcessState)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "http://" + addr + "/mcp"
}

// wiretap is a reverse proxy in front of an HTTP MCP server that records
// every request the server receives.
type wiretap struct {
	mu   sync.Mutex
	reqs []*tapped
}

type tapped struct {
	method  string
	session string
	version string // the MCP-Protocol-Version header
	body    wireMsg
}

func startWiretap(t *testing.T, target string) (*wiretap, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	wt := &wiretap{}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.URL.Path = u.Path },
		FlushInterval: -1,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		tr := &tapped{method: r.Method, session: r.Header.Get("Mcp-Session-Id"), version: r.Header.Get("MCP-Protocol-Version")}
		if len(b) > 0 {
			json.Unmarshal(b, &tr.body)
		}
		wt.mu.Lock()
		wt.reqs = append(wt.reqs, tr)
		wt.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return wt, srv.URL + "/mcp"
}

// find returns a copy of the first POST whose body matches.
func (wt *wiretap) find(match func(*tapped) bool) *tapped {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	for _, r := range wt.reqs {
		if r.method == http.MethodPost && match(r) {
			c := *r
			return &c
		}
	}
	return nil
}

// TestHTTPCancelAfterTwoProgress is TestStdioCancelAfterTwoProgress with
// server-everything in Streamable HTTP mode: it receives, on the call's
// session, notifications/cancelled naming its own id, and the adapter
// closes the call's response stream.
func TestHTTPCancelAfterTwoProgress(t *testing.T) {
	wt, target := startWiretap(t, httpEverything(t))
	closes := &streamCloses{m: map[string]bool{}}
	st := startStack(t, upstream.Options{URL: target, HTTPClient: &http.Client{Transport: closes}}, longOp, "echo")

	evs := runClient(t, "call2025.mjs", "--url", st.url, "--tool", longOp,
		"--args", longOpArgs, "--cancel-after-progress", "2", "--linger-ms", "5000")
	checkCancelled(t, evs)

	call := wt.find(func(r *tapped) bool { return r.body.Method == "tools/call" && r.body.Params.Name == longOp })
	if call == nil {
		t.Fatal("the server never received the tools/call")
	}
	testcluster.WaitFor(t, "the cancel upstream", func() bool {
		return wt.find(func(r *tapped) bool { return r.body.Method == "notifications/cancelled" }) != nil
	})
	cancel := wt.find(func(r *tapped) bool { return r.body.Method == "notifications/cancelled" })
	if !bytes.Equal(cancel.body.Params.RequestID, call.body.ID) || cancel.session != call.session || call.session == "" {
		t.Fatalf("notifications/cancelled named %s on session %q; want the upstream id %s on session %q",
			cancel.body.Params.RequestID, cancel.session, call.body.ID, call.session)
	}
	testcluster.WaitFor(t, "the adapter to close the call's response stream", func() bool { return closes.closed("tools/call") })
	t.Logf("upstream id %s on session %s; cancelled %s", call.body.ID, call.session, cancel.body.Params.RequestID)
	checkAudit(t, st, longOp, "cancelled", "client")
}

// streamCloses is the adapter's HTTP transport in the test: it notes the
// methods of requests whose response the adapter abandoned (cancelled)
// before the server ended it.
type streamCloses struct {
	mu       sync.Mutex
	m        map[string]bool
	versions map[string]string // MCP-Protocol-Version by method
}

func (s *streamCloses) RoundTrip(req *http.Request) (*http.Response, error) {
	var m wireMsg
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		json.Unmarshal(b, &m)
	}
	s.mu.Lock()
	if s.versions == nil {
		s.versions = map[string]string{}
	}
	s.versions[m.Method] = req.Header.Get("MCP-Protocol-Version")
	s.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || m.Method == "" {
		return resp, err
	}
	body := &eofBody{ReadCloser: resp.Body}
	context.AfterFunc(req.Context(), func() {
		if !body.eof.Load() {
			s.mu.Lock()
			s.m[m.Method] = true
			s.mu.Unlock()
		}
	})
	resp.Body = body
	return resp, nil
}

func (s *streamCloses) closed(method string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[method]
}

type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (s *streamCloses) version(method string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[method]
}
