package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks()...)
}

const prefix = "/mcpcancel/v1/"

// stack is the whole system on loopback: etcd, a coordinator, a worker
// with the demo tools, and one or more gateways serving HTTP.
type stack struct {
	cli      *clientv3.Client
	coord    *testcluster.Coordinator
	c        pb.CoordinatorServiceClient
	conn     *grpc.ClientConn // c's, for gateways
	w        *testcluster.Worker
	gateways []*gateway.Gateway
	urls     []string
}

type stackOptions struct {
	gateways int
	gw       gateway.Options
	coord    coordinator.Options
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	cl := etcdtest.Single(t)
	st := &stack{cli: cl.Client()}
	st.coord = testcluster.StartCoordinator(t, st.cli, o.coord)
	st.conn = st.coord.Conn(t)
	st.c = pb.NewCoordinatorServiceClient(st.conn)
	st.w = testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "w1"}, demo.Register)
	waitFor(t, "the demo tools", func() bool {
		resp, err := st.c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) >= 3
	})
	for range max(o.gateways, 1) {
		g, url := testcluster.StartGateway(t, st.conn, o.gw)
		st.gateways = append(st.gateways, g)
		st.urls = append(st.urls, url)
	}
	return st
}

// stdioPipes serves a stdio connection of the stack's first gateway on
// pipes, until the client closes its end (w): the client reads r.
func (st *stack) stdioPipes(t *testing.T) (r io.ReadCloser, w io.WriteCloser) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	go func() { // owned: ends when the client closes its stdin; waited for below
		defer close(done)
		st.gateways[0].ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		<-done
	})
	return outR, inW
}

// waitForTool waits until the coordinator lists the tool name.
func (st *stack) waitForTool(t *testing.T, name string) {
	t.Helper()
	waitFor(t, "the tool "+name, func() bool {
		resp, err := st.c.ListTools(t.Context(), nil)
		return err == nil && slices.ContainsFunc(resp.Tools, func(tl *pb.Tool) bool { return tl.GetName() == name })
	})
}

// audits reads the audit records of calls in a scope, by request id.
func (st *stack) audits(t *testing.T, scope string) map[string][]*coordinator.AuditRecord {
	t.Helper()
	out := map[string][]*coordinator.AuditRecord{}
	for _, as := range testcluster.Audits(t, st.cli) {
		for _, a := range as {
			if a.Scope == scope {
				out[string(a.RequestID)] = append(out[string(a.RequestID)], a)
			}
		}
	}
	return out
}

// allAudits reads every audit record, by call id.
func (st *stack) allAudits(t *testing.T) map[string][]*coordinator.AuditRecord {
	t.Helper()
	return testcluster.Audits(t, st.cli)
}

func (st *stack) revision(t *testing.T) int64 {
	t.Helper()
	resp, err := st.cli.Get(t.Context(), "revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// callWrites returns the keys written in revisions (from, to], leaving
// out worker registrations and the janitor's election, which a loaded
// machine can renew at any time.
func (st *stack) callWrites(t *testing.T, from, to int64) []string {
	t.Helper()
	if to <= from {
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var keys []string
	for resp := range st.cli.Watch(ctx, "/mcpcancel/v1/", clientv3.WithPrefix(), clientv3.WithRev(from+1)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			if ev.Kv.ModRevision > to || strings.HasPrefix(k, "/mcpcancel/v1/workers/") || strings.HasPrefix(k, "/mcpcancel/v1/janitor/") ||
				strings.HasPrefix(k, "/mcpcancel/v1/progress/") { // workers' progress digests: no call's

				continue
			}
			keys = append(keys, k)
		}
		if resp.Header.Revision >= to {
			return keys
		}
	}
	t.Fatal("watch ended before revision", to)
	return nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testcluster.WaitFor(t, what, cond)
}

// wire records every JSON-RPC message that crossed an HTTP client, in
// both directions, as the bytes were: the SDKs hide late responses.
type wire struct {
	mu      sync.Mutex
	msgs    []wireMsg
	session string // the Mcp-Session-Id the server gave
}

func (w *wire) sessionID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.session
}

type wireMsg struct {
	out  bool // client to server
	at   time.Time
	body map[string]any
}

func (w *wire) add(out bool, b []byte) {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return
	}
	w.mu.Lock()
	w.msgs = append(w.msgs, wireMsg{out: out, at: time.Now(), body: m})
	w.mu.Unlock()
}

func (w *wire) snapshot() []wireMsg {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireMsg(nil), w.msgs...)
}

// client returns an HTTP client that records the wire.
func (w *wire) client() *http.Client {
	return &http.Client{Transport: &recorder{w: w, rt: http.DefaultTransport}}
}

type recorder struct {
	w  *wire
	rt http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		r.w.add(true, b)
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := r.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		r.w.mu.Lock()
		r.w.session = id
		r.w.mu.Unlock()
	}
	pr, pw := io.Pipe()
	body := resp.Body
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	go func() { // owned by the response body: ends when it does
		defer body.Close()
		if !sse {
			b, err := io.ReadAll(body)
			r.w.add(false, b)
			pw.Write(b)
			pw.CloseWithError(err)
			return
		}
		br := bufio.NewReader(body)
		for {
			line, err := br.ReadBytes('\n')
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				r.w.add(false, bytes.TrimSpace(data))
			}
			if len(line) > 0 {
				if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	resp.Body = pr
	return resp, nil
}

// responsesTo lists the responses (results or errors) for a request id.
func responsesTo(msgs []wireMsg, id any) []wireMsg {
	var out []wireMsg
	for _, m := range msgs {
		if !m.out && m.body["method"] == nil && sameID(m.body["id"], id) {
			out = append(out, m)
		}
	}
	return out
}

func sameID(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// requestID finds the id the client gave its tools/call of a tool.
func requestIDOf(msgs []wireMsg, tool string) any {
	for _, m := range msgs {
		if m.out && m.body["method"] == "tools/call" {
			if p, _ := m.body["params"].(map[string]any); p["name"] == tool {
				return m.body["id"]
			}
		}
	}
	return nil
}

// waitRecorded waits until the calls with these numeric ids in scope have
// durable records, still running. A call runs beside its Begin, so its
// handler running says nothing of its record; a test that counts etcd
// writes or coordinator RPCs from some moment on waits for this first.
func waitRecorded(t *testing.T, c pb.CoordinatorServiceClient, scope string, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		waitFor(t, fmt.Sprintf("call %d's record", id), func() bool {
			got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{
				Key: &pb.CallKey{Scope: scope, RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: id}}}}})
			return err == nil && got.GetCall().GetState() == pb.CallState_CALL_STATE_RUNNING
		})
	}
}
