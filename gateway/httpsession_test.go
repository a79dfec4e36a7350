package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// A DELETE cancels each of the session's calls once: CloseSession cancels
// them at the coordinator and names them, and the gateway closes their
// gates without a CancelScope or a Cancel of its own, while their
// handlers (slow to stop, as a fronted server may be) still run. Each
// call ends with one audit record saying the client deleted the session,
// and no response.
func TestDeleteCancelsEachCallOnce(t *testing.T) {
	const calls = 3
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	stopping, release := make(chan struct{}, calls), make(chan struct{})
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "w1"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "hold"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			<-ctx.Done()
			stopping <- struct{}{}
			<-release // the tool takes its time to stop
			return nil, ctx.Err()
		})
	})
	conn := coord.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	_, url := testcluster.StartGateway(t, conn, gateway.Options{})
	waitFor(t, "the hold tool", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && slices.ContainsFunc(resp.Tools, func(tool *pb.Tool) bool { return tool.GetName() == "hold" })
	})
	sid := openSession(t, url)
	var done []<-chan streamResult
	for i := range calls {
		done = append(done, startCall(t, url, sid, i, "hold", map[string]any{}, nil))
	}
	waitRecorded(t, c, "session:"+sid, 0, 1, 2) // recorded, so the close cancels them itself
	waitFor(t, "the calls to run", func() bool {
		resp, err := c.ListWorkers(t.Context(), nil)
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == calls
	})
	before := testcluster.HandledRPCs(t, coord.Server.Registry())
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	resp.Body.Close()
	for range calls {
		<-stopping
	}
	after := testcluster.HandledRPCs(t, coord.Server.Registry())
	for _, m := range []string{"Cancel", "CancelScope"} {
		if n := after[m] - before[m]; n != 0 {
			t.Errorf("the DELETE cost %v %s RPCs besides CloseSession, want 0", n, m)
		}
	}
	if n := after["CloseSession"] - before["CloseSession"]; n != 1 {
		t.Errorf("%v CloseSession RPCs, want 1", n)
	}
	close(release)
	for i, d := range done {
		if r := <-d; r.err != nil || hasResponse(r.msgs) {
			t.Errorf("call %d after DELETE: %v %v", i, r.msgs, r.err)
		}
	}
	st := &stack{cli: cl.Client()}
	for i := range calls {
		as := st.audits(t, "session:"+sid)[strconv.Itoa(i)]
		if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "disconnect" || as[0].Reason != "session deleted by the client" {
			t.Errorf("call %d: audit %+v, want one record: cancelled by the client's disconnect", i, as)
		}
	}
}
