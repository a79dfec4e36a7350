package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// A 2025-11-25 Go SDK client cancels a call while its tool's question is
// on the client's screen: the gateway withdraws the question, so the
// client's elicitation handler sees its context end, and the worker's
// handler sees its own end too. Over HTTP the client has closed the
// call's stream with its cancel: the withdrawal comes on the session's.
func TestGoSDKQuestionWithdrawnWithItsCall(t *testing.T) {
	for _, tr := range []string{"http", "stdio"} {
		t.Run(tr, func(t *testing.T) { testQuestionWithdrawn(t, tr) })
	}
}

func testQuestionWithdrawn(t *testing.T, tr string) {
	st := newStack(t, stackOptions{})
	handlerDone := make(chan error, 1)
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coord.Addr, Name: "asker"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "ask_and_wait"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			_, err := c.Elicit(ctx, &mcp.ElicitParams{Message: "Proceed?", RequestedSchema: map[string]any{"type": "object"}})
			handlerDone <- err
			return nil, err
		})
	})
	st.waitForTool(t, "ask_and_wait")

	asked, testDone := make(chan struct{}), make(chan struct{})
	withdrawn := make(chan error, 1)
	c := mcp.NewClient(&mcp.Implementation{Name: "withdraw-test", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			close(asked)
			select { // the question stays until the gateway withdraws it
			case <-ctx.Done():
				withdrawn <- ctx.Err()
				return nil, ctx.Err()
			case <-testDone:
				return nil, errors.New("the test ended")
			}
		},
	})
	var w wire
	var tp mcp.Transport = &mcp.StreamableClientTransport{Endpoint: st.urls[0], HTTPClient: w.client(), MaxRetries: -1}
	if tr == "stdio" {
		outR, inW := st.stdioPipes(t)
		tp = &mcp.IOTransport{Reader: outR, Writer: inW}
	}
	cs, err := c.Connect(t.Context(), tp, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(testDone); cs.Close() })

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { // owned: ends with the call, which cancel ends
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_and_wait", Arguments: map[string]any{}})
		errc <- err
	}()
	<-asked
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("CallTool = %v, want context.Canceled", err)
	}
	select {
	case err := <-withdrawn:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the question ended with %v, want it cancelled", err)
		}
	case <-time.After(10 * time.Second):
		for _, m := range w.snapshot() {
			t.Logf("out=%v %v", m.out, m.body)
		}
		t.Fatal("the client's question was never withdrawn")
	}
	if err := <-handlerDone; err == nil {
		t.Error("the tool's question was answered, though its call was cancelled")
	}
}
