package gateway_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// heldCancels holds the gateway's Cancel RPCs until released, and says
// when the first one reached it.
type heldCancels struct {
	arrived, release chan struct{}
	once             sync.Once
}

func (h *heldCancels) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == pb.CoordinatorService_Cancel_FullMethodName {
		h.once.Do(func() { close(h.arrived) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// A client's cancel stops its call's handler at once, beside the decision:
// here the gateway's Cancel is held on its way to the coordinator, and the
// handler stops all the same. Once the Cancel goes on, the call is
// recorded once, cancelled by the client, and nothing of it reaches the
// client.
func TestClientCancelStopsTheHandlerBeforeItsDecision(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	coord := testcluster.StartCoordinator(t, cli, coordinator.Options{})
	started, stopped := make(chan struct{}), make(chan struct{})
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "w1"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "block", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			close(started)
			<-ctx.Done()
			close(stopped)
			return worker.Text("stopped"), nil
		})
	})
	held := &heldCancels{arrived: make(chan struct{}), release: make(chan struct{})}
	conn, err := grpc.NewClient(coord.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(held.intercept))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g, _ := testcluster.StartGateway(t, conn, gateway.Options{})
	cc := pb.NewCoordinatorServiceClient(conn)
	waitFor(t, "the block tool", func() bool {
		resp, err := cc.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) == 1
	})
	c := serveStdio(t, g)
	c.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	c.answerTo(t, 0)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	c.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	await(t, started, "the handler to start")
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"changed my mind"}}`)
	await(t, held.arrived, "the gateway's Cancel")
	await(t, stopped, "the handler to stop while its Cancel is held")

	close(held.release)
	waitFor(t, "the call's decision", func() bool {
		for _, as := range testcluster.Audits(t, cli) {
			if len(as) > 0 && as[0].Tool == "block" {
				return true
			}
		}
		return false
	})
	for _, as := range testcluster.Audits(t, cli) {
		if as[0].Tool != "block" {
			continue
		}
		if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "client" || as[0].Reason != "changed my mind" {
			t.Fatalf("audit = %+v, want one record, cancelled by the client", as)
		}
	}
	c.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	c.answerTo(t, 2)
}

// answerTo skips notifications up to the answer to id, and fails on an
// answer to any other request.
func (c *stdioConn) answerTo(t *testing.T, id float64) map[string]any {
	t.Helper()
	for {
		m := c.next(t)
		if _, ok := m["id"]; !ok {
			continue
		}
		if m["id"] != id {
			t.Fatalf("got %v, want the answer to request %v", m, id)
		}
		return m
	}
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
