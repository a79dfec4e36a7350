package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// Run: go test ./gateway -run '^$' -bench DeleteSession -count 6
//
// BenchmarkDeleteSession times an HTTP DELETE of a 2025 session with 16
// calls in flight, each on its own POST stream: an op is the time from
// the DELETE until every stream has ended and the worker runs no
// handler. It reports the coordinator RPCs that cancelled (Cancel and
// CancelScope, from the gateway and the worker alike) per call and per
// op, beside the one CloseSession per op: the settle work the DELETE
// cost. sleep stops at once when cancelled; slowstop, like a fronted
// server that takes a while to stop, 20 ms after, so its calls are still
// held by the gateway when CloseSession returns.
func BenchmarkDeleteSession(b *testing.B) {
	const calls = 16
	cl := etcdtest.Single(b)
	coord := testcluster.StartCoordinator(b, cl.Client(), coordinator.Options{})
	w := testcluster.StartWorker(b, worker.Options{Coordinator: coord.Addr, Name: "bench"}, func(w *worker.Worker) {
		demo.Register(w)
		w.Handle(worker.Tool{Name: "slowstop"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			<-ctx.Done()
			<-time.After(20 * time.Millisecond) // the tool's own time to stop
			return nil, ctx.Err()
		})
	})
	_, url := testcluster.StartGateway(b, coord.Conn(b), gateway.Options{})
	for _, tool := range []string{"sleep", "slowstop"} {
		b.Run(tool, func(b *testing.B) {
			before := testcluster.HandledRPCs(b, coord.Server.Registry())
			for b.Loop() {
				b.StopTimer()
				sid := benchSession(b, url)
				var wg sync.WaitGroup
				for i := range calls {
					wg.Go(func() { benchLongCall(b, url, sid, tool, i) })
				}
				awaitInFlight(b, w, calls)
				b.StartTimer()
				benchDelete(b, url, sid)
				wg.Wait()
				awaitInFlight(b, w, 0)
			}
			after := testcluster.HandledRPCs(b, coord.Server.Registry())
			per := func(m string) float64 { return (after[m] - before[m]) / float64(b.N) }
			b.ReportMetric(per("Cancel")/calls, "cancels/call")
			b.ReportMetric(per("CancelScope"), "cancelscopes/op")
		})
	}
}

func benchSession(tb testing.TB, url string) string {
	tb.Helper()
	resp, _ := testcluster.PostMCP(tb, url, "", "",
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		tb.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	return sid
}

// benchLongCall POSTs a call of tool that runs until cancelled, and
// reads its stream to the end.
func benchLongCall(tb testing.TB, url, sid, tool string, id int) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"seconds":600,"steps":1}}}`, id, tool)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Errorf("call %d: %v", id, err)
		return
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
}

func benchDelete(tb testing.TB, url, sid string) {
	tb.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("DELETE: %d", resp.StatusCode)
	}
}
