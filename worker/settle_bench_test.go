package worker_test

import (
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// Run: go test ./worker -run '^$' -bench CancelledCall -count 6
//
// BenchmarkCancelledCall cancels calls the way the gateway does: the
// client's Cancel wins at the coordinator, then the gateway closes the
// Execute stream (its fast path), racing the coordinator's stop order to
// the worker. An op is one call, from its Begin until the worker has
// settled it and runs no handler. cancels/call counts the Cancel RPCs the
// coordinator answered beyond the client's own: the worker's, which the
// decision already made are not needed.
func BenchmarkCancelledCall(b *testing.B) {
	cl := etcdtest.Single(b)
	coord := testcluster.StartCoordinator(b, cl.Client(), coordinator.Options{})
	wt := startWaitCalls(b, coord.Client(b), coord.Addr, "bench")
	before := testcluster.HandledRPCs(b, coord.Server.Registry())["Cancel"]
	i := int64(0)
	for b.Loop() {
		i++
		wt.end(b, i, true)
	}
	extra := testcluster.HandledRPCs(b, coord.Server.Registry())["Cancel"] - before - float64(b.N)
	b.ReportMetric(extra/float64(b.N), "cancels/call")
}

// awaitIdle polls until the worker runs no handler and has settled its
// last call (the gauge drops once the settle is done), for at most a
// minute.
func awaitIdle(b testing.TB, w *testcluster.Worker) {
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		mfs, err := w.Registry().Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "mcpcancel_worker_calls_in_flight" && mf.GetMetric()[0].GetGauge().GetValue() == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("the worker did not settle its call within a minute")
		}
		<-tick.C
	}
}
