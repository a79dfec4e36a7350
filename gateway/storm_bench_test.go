package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// Run: go test ./gateway -run '^$' -bench StdioDisconnect -benchtime 5x
//
// BenchmarkStdioDisconnect times a disconnect storm: 500 sleep calls in
// flight on one stdio connection, then the client goes away; an op is the
// time from closing the connection until the gateway has settled every
// call (one CancelScope) and the worker has ended every call. On an
// embedded etcd with fsync on, as in production.
func BenchmarkStdioDisconnect(b *testing.B) {
	const calls = 500
	cl := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	coord := testcluster.StartCoordinator(b, cl.Client(), coordinator.Options{})
	w := testcluster.StartWorker(b, worker.Options{Coordinator: coord.Addr, Name: "storm"}, demo.Register)
	g, _ := testcluster.StartGateway(b, coord.Conn(b), gateway.Options{ScopeLimit: calls, GlobalLimit: calls})
	for b.Loop() {
		b.StopTimer()
		in, served := stormConn(b, g, w, calls)
		b.StartTimer()
		in.Close()
		<-served
		awaitInFlight(b, w, 0)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*calls), "µs/call")
}

// stormConn opens a stdio connection and puts calls sleeps in flight on
// it; closing in disconnects, and served is closed once ServeStdio has
// returned (every call settled).
func stormConn(b *testing.B, g *gateway.Gateway, w *testcluster.Worker, calls int) (in io.WriteCloser, served chan struct{}) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served = make(chan struct{})
	go func() { // owned: ends when inW is closed
		defer close(served)
		g.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	go io.Copy(io.Discard, outR) // owned: ends when ServeStdio closes outW
	bw := bufio.NewWriter(inW)
	fmt.Fprintln(bw, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"storm","version":"1"}}}`)
	fmt.Fprintln(bw, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i := range calls {
		fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":600,"steps":1}}}`+"\n", i+1)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	awaitInFlight(b, w, calls)
	return inW, served
}

// awaitInFlight polls until the worker holds n calls, for at most two
// minutes (a storm on a loaded machine takes long; a broken one forever).
func awaitInFlight(b *testing.B, w *testcluster.Worker, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for inFlight(b, w) != n {
		if time.Now().After(deadline) {
			b.Fatalf("%d calls on the worker after two minutes, want %d", inFlight(b, w), n)
		}
		<-tick.C
	}
}

// inFlight is the worker's calls not yet ended, from its own gauge.
func inFlight(b *testing.B, w *testcluster.Worker) int {
	mfs, err := w.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "mcpcancel_worker_calls_in_flight" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	b.Fatal("no mcpcancel_worker_calls_in_flight")
	return 0
}
