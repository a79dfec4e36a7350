package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
// sleep calls in flight, each on its own POST stream: an op is the time
// from the DELETE until every stream has ended and the worker runs no
// handler. It reports the coordinator RPCs that cancelled (Cancel and
// CancelScope, from the gateway and the worker alike) per call, beside
// the one CloseSession per op: the settle work the DELETE cost.
func BenchmarkDeleteSession(b *testing.B) {
	const calls = 16
	cl := etcdtest.Single(b)
	coord := testcluster.StartCoordinator(b, cl.Client(), coordinator.Options{})
	w := testcluster.StartWorker(b, worker.Options{Coordinator: coord.Addr, Name: "bench"}, demo.Register)
	_, url := testcluster.StartGateway(b, coord.Client(b), gateway.Options{})
	before := rpcCounts(b, coord.Server.Registry())
	for b.Loop() {
		b.StopTimer()
		sid := benchSession(b, url)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() { benchSleepCall(b, url, sid, i) })
		}
		awaitInFlight(b, w, calls)
		b.StartTimer()
		benchDelete(b, url, sid)
		wg.Wait()
		awaitInFlight(b, w, 0)
	}
	after := rpcCounts(b, coord.Server.Registry())
	per := func(m string) float64 { return (after[m] - before[m]) / float64(b.N*calls) }
	b.ReportMetric(per("Cancel"), "cancels/call")
	b.ReportMetric(per("CancelScope")*calls, "cancelscopes/op")
}

// rpcCounts are the coordinator's handled RPCs, by method.
func rpcCounts(tb testing.TB, reg *prometheus.Registry) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
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

// benchSleepCall POSTs a long sleep and reads its stream to the end.
func benchSleepCall(tb testing.TB, url, sid string, id int) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":600,"steps":1}}}`, id)
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
