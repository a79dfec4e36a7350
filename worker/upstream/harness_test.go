package upstream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(workerProcEnv); args != "" {
		os.Exit(runWorkerProc(args)) // a worker process of a test
	}
	if os.Getenv(fixtureServerEnv) != "" {
		os.Exit(runFixtureServer()) // a fronted server of a test
	}
	if sdk := os.Getenv(matrixServerEnv); sdk != "" {
		os.Exit(runMatrixServer(sdk)) // a matrix server of a test (matrix_test.go)
	}
	if os.Getenv(mcpgoServerEnv) != "" {
		os.Exit(runMcpgoServer()) // a fronted server of a test, on another SDK
	}
	goleak.VerifyTestMain(m)
}

// stack is a real etcd, coordinator, worker with an adapter, and gateway.
type stack struct {
	etcd      *clientv3.Client
	coord     pb.CoordinatorServiceClient
	coordAddr string
	adapter   *upstream.Adapter
	gw        *gateway.Gateway
	url       string // the gateway's MCP endpoint
	// stopAdapter stops the adapter (as at shutdown); idempotent.
	stopAdapter func()
}

// startStack runs the adapter with opts (its Logger set to the test log)
// on a worker behind a gateway, and waits until the coordinator lists
// every tool in want.
func startStack(t testing.TB, opts upstream.Options, want ...string) *stack {
	t.Helper()
	st := startBare(t)
	st.adapter, st.stopAdapter = st.startAdapter(t, "adapter", opts)
	st.waitTools(t, func(tools map[string]*pb.Tool) bool {
		for _, w := range want {
			if tools[w] == nil {
				return false
			}
		}
		return true
	})
	return st
}

// startBare runs etcd, a coordinator and a gateway, with no worker.
func startBare(t testing.TB) *stack {
	t.Helper()
	e := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, e.Client(), coordinator.Options{})
	st := &stack{etcd: e.Client(), coord: c.Client(t), coordAddr: c.Addr}
	st.gw, st.url = testcluster.StartGateway(t, c.Conn(t), gateway.Options{})
	return st
}

// startAdapter runs an adapter with opts on a worker of its own named
// name, and waits until it has registered its tools. stop stops it (as
// at shutdown); it is idempotent.
func (st *stack) startAdapter(t testing.TB, name string, opts upstream.Options) (a *upstream.Adapter, stop func()) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = 20 * time.Millisecond
	}
	if opts.TerminateWait == 0 {
		opts.TerminateWait = 200 * time.Millisecond
	}
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coordAddr, Name: name}, func(w *worker.Worker) {
		a = upstream.New(w, opts)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("adapter Run: %v", err)
		}
	})
	t.Cleanup(stop)
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("adapter stopped before its tools were registered: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the adapter did not register its tools")
	}
	return a, stop
}

// waitTools polls the coordinator's tool list until ok holds.
func (st *stack) waitTools(t testing.TB, ok func(map[string]*pb.Tool) bool) map[string]*pb.Tool {
	t.Helper()
	var tools map[string]*pb.Tool
	testcluster.WaitFor(t, "the coordinator's tool list", func() bool {
		resp, err := st.coord.ListTools(t.Context(), &pb.ListToolsRequest{})
		if err != nil {
			return false
		}
		tools = map[string]*pb.Tool{}
		for _, tool := range resp.GetTools() {
			tools[tool.GetName()] = tool
		}
		return ok(tools)
	})
	return tools
}

// audits returns the audit records of every call of tool.
func (st *stack) audits(t *testing.T, tool string) []*coordinator.AuditRecord {
	t.Helper()
	var out []*coordinator.AuditRecord
	for _, recs := range testcluster.Audits(t, st.etcd) {
		for _, r := range recs {
			if r.Tool == tool {
				out = append(out, r)
			}
		}
	}
	return out
}

// everything returns the path of server-everything's entry point,
// installing the pinned npm packages first if needed.
func everything(t testing.TB) string {
	t.Helper()
	return filepath.Join(nodetest.Install(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// tap is a log of the upstream side of a stdio wire, written by
// testdata/tap.mjs: what the server received and what it sent.
type tap struct{ file string }

// stdioEverything returns the command running server-everything in stdio
// mode behind the tap.
func stdioEverything(t *testing.T) ([]string, *tap) {
	t.Helper()
	tp := &tap{file: filepath.Join(t.TempDir(), "wire.log")}
	script, err := filepath.Abs(filepath.Join("testdata", "tap.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"node", script, tp.file, "--", "node", everything(t), "stdio"}, tp
}

// wireMsg is one JSON-RPC message on the upstream wire.
type wireMsg struct {
	Dir    string // "in" (to the server) or "out" (from it)
	ID     json.RawMessage
	Method string
	Params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		RequestID json.RawMessage `json:"requestId"`
		Token     json.RawMessage `json:"progressToken"`
		Progress  float64         `json:"progress"`
		Meta      struct {
			Token json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	Result json.RawMessage
	Error  json.RawMessage
}

func (tp *tap) messages(t *testing.T) []wireMsg {
	t.Helper()
	b, err := os.ReadFile(tp.file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return parseWire(t, b)
}

func parseWire(t *testing.T, b []byte) []wireMsg {
	var out []wireMsg
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		dir, line, _ := strings.Cut(sc.Text(), " ")
		if dir != "in" && dir != "out" {
			continue // the pid lines
		}
		var m wireMsg
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("wire line %q: %v", line, err)
		}
		m.Dir = dir
		out = append(out, m)
	}
	return out
}

// call finds the tools/call the server received for tool, with args
// containing argsHas.
func findCall(msgs []wireMsg, tool, argsHas string) *wireMsg {
	for i, m := range msgs {
		if m.Dir == "in" && m.Method == "tools/call" && m.Params.Name == tool && strings.Contains(string(m.Params.Arguments), argsHas) {
			return &msgs[i]
		}
	}
	return nil
}

// cancelsFor lists the ids named by the notifications/cancelled the
// server received.
func cancelled(msgs []wireMsg) []string {
	var ids []string
	for _, m := range msgs {
		if m.Dir == "in" && m.Method == "notifications/cancelled" {
			ids = append(ids, string(m.Params.RequestID))
		}
	}
	return ids
}

// progressSent lists the progress values the server sent for token.
func progressSent(msgs []wireMsg, token json.RawMessage) []float64 {
	var ps []float64
	for _, m := range msgs {
		if m.Dir == "out" && m.Method == "notifications/progress" && bytes.Equal(m.Params.Token, token) {
			ps = append(ps, m.Params.Progress)
		}
	}
	return ps
}

// event is one JSON line of a test/clients script.
type event struct {
	Event   string          `json:"event"`
	Kind    string          `json:"kind"`
	Result  json.RawMessage `json:"result"`
	Message json.RawMessage `json:"message"`
	Dir     string          `json:"dir"`
	Data    json.RawMessage `json:"data"`
}

// runClient runs a test/clients script to the end and returns its events.
func runClient(t *testing.T, script string, args ...string) []event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := nodetest.Node(t, ctx, append([]string{script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.Bytes())
	}
	var evs []event
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s printed %q: %v", script, line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

func count(evs []event, name string) int {
	n := 0
	for _, e := range evs {
		if e.Event == name {
			n++
		}
	}
	return n
}

// testLogger logs to the test's log while it runs.
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// pids returns the process ids the tap logged: its own and the server's,
// for each run.
func (tp *tap) pids(t *testing.T) (taps, servers []int) {
	t.Helper()
	b, err := os.ReadFile(tp.file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		kind, n, _ := strings.Cut(line, " ")
		pid, err := strconv.Atoi(n)
		switch {
		case err != nil:
		case kind == "tap":
			taps = append(taps, pid)
		case kind == "server":
			servers = append(servers, pid)
		}
	}
	return taps, servers
}
