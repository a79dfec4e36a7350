package gateway_test

import (
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// A client's cancel for a request this gateway does not hold waits at the
// coordinator for the call's record, which another replica may be about
// to write; for a request that never began it waits as long as a Begin
// may take (the coordinator's OpTimeout), then answers unknown. The
// gateway bounded that Cancel as a read (2 s), took the wait for a dead
// link and redialled, four times over (seen in the fault harness): every
// other RPC on the link was cut off or moved for a cancel of nothing.
func TestCancelAwaitingARecordKeepsTheLink(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	const wait = 3 * time.Second // longer than a read's attempt
	co := testcluster.StartCoordinator(t, cli, coordinator.Options{OpTimeout: wait})
	conn, err := dial.Open(co.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g, url := testcluster.StartGateway(t, conn, gateway.Options{Name: "gw-await"})
	sid := openSession(t, url)

	sent := time.Now()
	if code, body := post(t, url, sid, cancelMsg(7, "never sent")); code != 202 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	waitFor(t, "the cancel to be answered unknown", func() bool {
		return metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "unknown") == 1
	})
	took := time.Since(sent)
	if gen := conn.Gen(); gen != 1 {
		t.Fatalf("the gateway redialled its coordinator link %d times for one cancel of nothing", gen-1)
	}
	if took < wait-time.Second {
		t.Fatalf("the cancel was answered after %v; the coordinator should have waited about %v for the record", took, wait)
	}
	t.Logf("a cancel of nothing was answered unknown after %v, on the same link", took.Round(time.Millisecond))
}
