package upstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// askingServer is a fronted 2025-11-25 server, on the Go SDK, whose tools
// ask their client by elicitation/create during tools/call, as 2025-era
// servers do, and count how often they run.
type askingServer struct {
	mu   sync.Mutex
	runs map[string]int

	cancels atomic.Int32    // notifications/cancelled the server received
	ended   chan string     // a tool whose context ended while it ran
	waiting chan string     // a tool that has its answers and waits for its context
	quit    context.Context // ends when the test does: every tool ends
}

// The tools: elicit1 asks one question, elicit2 two, one after the
// other; elicit_wait asks one, then waits for its context to end.
var askingTools = map[string][]string{"elicit1": {"name"}, "elicit2": {"name", "color"}, "elicit_wait": {"name"}}

func (u *askingServer) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "asking", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	for name, fields := range askingTools {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: "asks its client, then answers"},
			func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				if u.quit.Err() != nil {
					return nil, nil, u.quit.Err()
				}
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				defer context.AfterFunc(u.quit, cancel)()
				u.mu.Lock()
				u.runs[name]++
				u.mu.Unlock()
				var got []string
				for _, f := range fields {
					r, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your " + f + "?",
						RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{f: map[string]any{"type": "string"}}}})
					if err != nil {
						u.awaitEnd(ctx, name) // a cancel's POST may come after the answer's
						return nil, nil, err
					}
					got = append(got, fmt.Sprint(r.Content[f]))
				}
				if name == "elicit_wait" {
					u.waiting <- name
					u.awaitEnd(ctx, name)
					return nil, nil, ctx.Err()
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello " + strings.Join(got, ", ")}}}, nil, nil
			})
	}
	return s
}

// awaitEnd reports the tool's context ending, as the tool sees it.
func (u *askingServer) awaitEnd(ctx context.Context, name string) {
	<-ctx.Done()
	if u.quit.Err() == nil {
		u.ended <- name
	}
}

func (u *askingServer) ran(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[name]
}

// parkStack is etcd, a coordinator, two gateway replicas sharing a state
// key, and a worker whose adapter fronts an askingServer over HTTP.
type parkStack struct {
	*stack
	up     *askingServer
	urls   [2]string
	worker *testcluster.Worker
}

func startParkStack(t *testing.T, inputTimeout time.Duration) *parkStack {
	t.Helper()
	quit, stop := context.WithCancel(context.Background())
	up := &askingServer{runs: map[string]int{}, ended: make(chan string, 8), waiting: make(chan string, 8), quit: quit}
	srv := up.server()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte(`"notifications/cancelled"`)) {
				up.cancels.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	t.Cleanup(stop) // before the server closes: its tools end

	e := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, e.Client(), coordinator.Options{})
	key := bytes.Repeat([]byte{7}, 32)
	st := &parkStack{stack: &stack{etcd: e.Client(), coord: c.Client(t), coordAddr: c.Addr}, up: up}
	for i := range st.urls {
		_, st.urls[i] = testcluster.StartGateway(t, c.Conn(t), gateway.Options{StateKey: key, InputTimeout: inputTimeout})
	}
	st.startWorker(t, upstream.Options{URL: hs.URL, Sessions: upstream.Shared, Logger: testLogger(t)})
	st.waitTools(t, func(tools map[string]*pb.Tool) bool {
		return tools["elicit1"] != nil && tools["elicit2"] != nil && tools["elicit_wait"] != nil
	})
	return st
}

// startWorker runs a worker named adapter with an adapter fronting opts,
// as startAdapter does, and keeps the worker to stop it.
func (st *parkStack) startWorker(t *testing.T, opts upstream.Options) {
	t.Helper()
	st.worker = testcluster.StartWorker(t, worker.Options{Coordinator: st.coordAddr, Name: "adapter"}, func(w *worker.Worker) {
		st.adapter = upstream.New(w, opts)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.adapter.Run(ctx) }() // owned: stopAdapter waits for it
	st.stopAdapter = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("adapter Run: %v", err)
		}
	})
	t.Cleanup(st.stopAdapter)
	select {
	case <-st.adapter.Ready():
	case err := <-done:
		t.Fatalf("adapter stopped before its tools were registered: %v", err)
	}
}

// client2026 connects a Go SDK client speaking 2026-07-28 to url, with
// its own multi round-trip loop off: the test answers input_required
// itself, at the replica it chooses.
func client2026(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "park-test", Version: "1"}, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			t.Error("a 2026-07-28 client was sent a request")
			return nil, errors.New("unexpected")
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// inputRequired checks res asks one elicitation and returns its key.
func inputRequired(t *testing.T, res *mcp.CallToolResult, err error) string {
	t.Helper()
	if err != nil || res == nil || !res.NeedsInput() || len(res.InputRequests) != 1 || res.RequestState == "" {
		b, _ := json.Marshal(res)
		t.Fatalf("the call answered %s, %v; want input_required with one question", b, err)
	}
	for k, r := range res.InputRequests {
		if _, ok := r.(*mcp.ElicitParams); !ok {
			t.Fatalf("input request %q is %T, want an elicitation", k, r)
		}
		return k
	}
	return ""
}

func answer(tool, key, field, value, state string) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}, RequestState: state,
		InputResponses: mcp.InputResponseMap{key: &mcp.ElicitResult{Action: "accept", Content: map[string]any{field: value}}}}
}

// A fronted 2025-era server's tool that asks its client runs once per
// call: a 2026-07-28 client gets input_required, and its retry, at
// another replica, resumes the parked upstream call, whose question gets
// the client's answer; the client gets the tool's result. Each round's
// record says it ended input_required, parked; the last completed.
func TestParkedUpstreamRunsOnce(t *testing.T) {
	st := startParkStack(t, 0)
	a, b := client2026(t, st.urls[0]), client2026(t, st.urls[1])
	t.Run("one question", func(t *testing.T) {
		res, err := a.CallTool(t.Context(), &mcp.CallToolParams{Name: "elicit1", Arguments: map[string]any{}})
		k := inputRequired(t, res, err)
		if n := testcluster.Gauge(t, st.worker.Registry(), "mcpcancel_worker_parked_calls"); n != 1 {
			t.Fatalf("%v parked calls; want 1", n)
		}
		res, err = b.CallTool(t.Context(), answer("elicit1", k, "name", "Ada", res.RequestState))
		if err != nil || res.IsError || text(res) != "hello Ada" {
			t.Fatalf("the retry answered %+v, %v; want the tool's greeting", res, err)
		}
		if n := testcluster.Gauge(t, st.worker.Registry(), "mcpcancel_worker_parked_calls"); n != 0 {
			t.Fatalf("%v parked calls after the retry; want none", n)
		}
		if n := st.up.ran("elicit1"); n != 1 {
			t.Fatalf("the upstream tool ran %d times; want once", n)
		}
		checkRounds(t, st.stack, "elicit1", 1)
	})
	t.Run("two questions", func(t *testing.T) {
		res, err := a.CallTool(t.Context(), &mcp.CallToolParams{Name: "elicit2", Arguments: map[string]any{}})
		k1 := inputRequired(t, res, err)
		res, err = b.CallTool(t.Context(), answer("elicit2", k1, "name", "Ada", res.RequestState))
		k2 := inputRequired(t, res, err)
		if k2 == k1 {
			t.Fatalf("the second question has the first one's key %q", k1)
		}
		res, err = a.CallTool(t.Context(), answer("elicit2", k2, "color", "blue", res.RequestState))
		if err != nil || res.IsError || text(res) != "hello Ada, blue" {
			t.Fatalf("the last retry answered %+v, %v; want the tool's greeting", res, err)
		}
		if n := st.up.ran("elicit2"); n != 1 {
			t.Fatalf("the upstream tool ran %d times; want once", n)
		}
		checkRounds(t, st.stack, "elicit2", 2)
	})
	t.Run("tampered state", func(t *testing.T) {
		res, err := a.CallTool(t.Context(), &mcp.CallToolParams{Name: "elicit1", Arguments: map[string]any{}})
		k := inputRequired(t, res, err)
		state := []byte(res.RequestState)
		state[len(state)/2] ^= 1
		_, err = b.CallTool(t.Context(), answer("elicit1", k, "name", "Eve", string(state)))
		if err == nil || !strings.Contains(err.Error(), "integrity") {
			t.Fatalf("a tampered requestState was answered %v; want it refused", err)
		}
		res, err = a.CallTool(t.Context(), answer("elicit1", k, "name", "Grace", res.RequestState))
		if err != nil || res.IsError || text(res) != "hello Grace" {
			t.Fatalf("the untampered retry answered %+v, %v; want the tool's greeting", res, err)
		}
		if n := st.up.ran("elicit1"); n != 2 {
			t.Fatalf("the upstream tool ran %d times in all; want twice (once per call)", n)
		}
	})
	if n := st.up.cancels.Load(); n != 0 {
		t.Errorf("the server got %d notifications/cancelled; want none while parked", n)
	}
}

// checkRounds checks tool's records: rounds calls that ended
// input_required with their work parked, and one completion.
func checkRounds(t *testing.T, st *stack, tool string, rounds int) {
	t.Helper()
	var recs []*coordinator.AuditRecord
	testcluster.WaitFor(t, "the rounds' records", func() bool {
		recs = st.audits(t, tool)
		return len(recs) >= rounds+1
	})
	parked, completed := 0, 0
	for _, r := range recs {
		switch {
		case r.Outcome == "completed":
			completed++
		case r.Outcome == "cancelled" && r.Initiator == "tool" && strings.Contains(r.Reason, "input_required") && strings.Contains(r.Reason, "parked"):
			parked++
			if len(r.ChildRequests) != 1 || r.ChildRequests[0].Outcome != "parked" {
				t.Errorf("a round's record lists its question as %+v; want it parked", r.ChildRequests)
			}
		}
	}
	if parked != rounds || completed != 1 || len(recs) != rounds+1 {
		b, _ := json.Marshal(recs)
		t.Fatalf("records of %s: %s; want %d rounds ended input_required and parked, then one completion", tool, b, rounds)
	}
}

// A parked call that its client never retries is cancelled at its server
// once its bound passes: the tool sees its context end, the server got
// one notifications/cancelled, and the round has its one record. A retry
// after that is told its question expired; the tool does not run again.
func TestParkedUpstreamExpires(t *testing.T) {
	st := startParkStack(t, 2*time.Second)
	a := client2026(t, st.urls[0])
	res, err := a.CallTool(t.Context(), &mcp.CallToolParams{Name: "elicit1", Arguments: map[string]any{}})
	k := inputRequired(t, res, err)
	select {
	case name := <-st.up.ended:
		if name != "elicit1" {
			t.Fatalf("%s ended; want elicit1", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the parked call's upstream tool did not see its context end")
	}
	if n := st.up.cancels.Load(); n != 1 {
		t.Errorf("the server got %d notifications/cancelled; want 1", n)
	}
	recs := st.audits(t, "elicit1")
	if len(recs) != 1 || recs[0].Outcome != "cancelled" || !strings.Contains(recs[0].Reason, "parked") {
		b, _ := json.Marshal(recs)
		t.Fatalf("records: %s; want the round's one record", b)
	}
	_, err = client2026(t, st.urls[1]).CallTool(t.Context(), answer("elicit1", k, "name", "Ada", res.RequestState))
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a retry after the park expired was answered %v; want its question expired", err)
	}
	if n := st.up.ran("elicit1"); n != 1 {
		t.Fatalf("the upstream tool ran %d times; want once", n)
	}
}

// A retry that resumes the parked call and is then cancelled by its
// client cancels the upstream tools/call, once; its record says the
// client cancelled it.
func TestParkedUpstreamRetryCancelled(t *testing.T) {
	st := startParkStack(t, 0)
	a, b := client2026(t, st.urls[0]), client2026(t, st.urls[1])
	res, err := a.CallTool(t.Context(), &mcp.CallToolParams{Name: "elicit_wait", Arguments: map[string]any{}})
	k := inputRequired(t, res, err)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { // owned: the test reads errc
		_, err := b.CallTool(ctx, answer("elicit_wait", k, "name", "Ada", res.RequestState))
		errc <- err
	}()
	select {
	case <-st.up.waiting:
	case err := <-errc:
		t.Fatalf("the retry ended (%v) before the tool had its answer", err)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled retry returned normally")
	}
	select {
	case <-st.up.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream tool did not see its context end")
	}
	if n := st.up.cancels.Load(); n != 1 {
		t.Errorf("the server got %d notifications/cancelled; want 1", n)
	}
	testcluster.WaitFor(t, "the retry's record", func() bool { return len(st.audits(t, "elicit_wait")) == 2 })
	var cancelled int
	for _, r := range st.audits(t, "elicit_wait") {
		if r.Outcome == "cancelled" && r.Initiator == "client" {
			cancelled++
		}
	}
	if cancelled != 1 || st.up.ran("elicit_wait") != 1 {
		t.Fatalf("%d records cancelled by the client, %d runs; want one of each", cancelled, st.up.ran("elicit_wait"))
	}
}

// A worker that drains cancels its parked calls at their server (the
// tool sees its context end, and the server got one
// notifications/cancelled); a retry that then comes is refused with
// -32602, saying its question expired, rather than placed on another
// worker or run anew.
func TestParkedUpstreamWorkerGone(t *testing.T) {
	st := startParkStack(t, 0)
	res, err := client2026(t, st.urls[0]).CallTool(t.Context(), &mcp.CallToolParams{Name: "elicit1", Arguments: map[string]any{}})
	k := inputRequired(t, res, err)
	st.worker.Stop()
	select {
	case <-st.up.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the parked call's upstream tool did not see its context end")
	}
	if n := st.up.cancels.Load(); n != 1 {
		t.Errorf("the server got %d notifications/cancelled; want 1", n)
	}
	testcluster.WaitFor(t, "the worker gone from the coordinator", func() bool {
		resp, err := st.coord.ListWorkers(t.Context(), &pb.ListWorkersRequest{})
		return err == nil && len(resp.GetWorkers()) == 0
	})
	_, err = client2026(t, st.urls[1]).CallTool(t.Context(), answer("elicit1", k, "name", "Ada", res.RequestState))
	if err == nil || !strings.Contains(err.Error(), "server session is gone") {
		t.Fatalf("a retry after its worker left was answered %v; want it refused, saying its question expired", err)
	}
	if n := st.up.ran("elicit1"); n != 1 {
		t.Fatalf("the tool ran %d times; want once", n)
	}
}
