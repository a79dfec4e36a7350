package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// URL elicitation's 2025-11-25 extras, end to end: a tool that cannot go
// on until the user visits a URL answers -32042 listing the elicitation;
// once the out-of-band interaction is done, CompleteElicitation sends
// notifications/elicitation/complete to the session that was asked, on
// whichever replica holds it, and to no other; a client that did not
// declare URL elicitation is never sent the error; the call fails.
func TestURLElicitationRequiredAndComplete(t *testing.T) {
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	conn := coord.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	w := testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "urls"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "connect", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			var a struct {
				ID string `json:"id"`
			}
			json.Unmarshal(c.Arguments, &a)
			return nil, worker.URLElicitationRequired("connect your account first", &mcp.ElicitParams{
				ElicitationID: a.ID, URL: "https://example.test/connect?e=" + a.ID, Message: "Authorise access",
			})
		})
	})
	waitFor(t, "the connect tool", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.GetTools()) == 1
	})
	_, urlA := testcluster.StartGateway(t, conn, gateway.Options{Name: "a"})
	_, urlB := testcluster.StartGateway(t, conn, gateway.Options{Name: "b"})

	type client struct {
		cs       *mcp.ClientSession
		complete chan string
	}
	connect := func(url string, urlMode bool) *client {
		cl := &client{complete: make(chan string, 4)}
		caps := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}}
		if urlMode {
			caps.Elicitation.URL = &mcp.URLElicitationCapabilities{}
		}
		mc := mcp.NewClient(&mcp.Implementation{Name: "urls", Version: "0"}, &mcp.ClientOptions{
			Capabilities: caps,
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "decline"}, nil
			},
			ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
				cl.complete <- r.Params.ElicitationID
			},
		})
		cs, err := mc.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		cl.cs = cs
		return cl
	}
	asked, other, formOnly := connect(urlA, true), connect(urlB, true), connect(urlA, false)

	_, err := asked.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "connect", Arguments: map[string]any{"id": "e-1"}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != worker.CodeURLElicitationRequired {
		t.Fatalf("the call answered %v, want a -32042 error", err)
	}
	var data struct {
		Elicitations []map[string]any `json:"elicitations"`
	}
	if json.Unmarshal(rpcErr.Data, &data) != nil || len(data.Elicitations) != 1 ||
		data.Elicitations[0]["mode"] != "url" || data.Elicitations[0]["elicitationId"] != "e-1" || data.Elicitations[0]["url"] != "https://example.test/connect?e=e-1" {
		t.Fatalf("the error's data = %s, want the one URL elicitation", rpcErr.Data)
	}

	// A client that declared only form elicitation is not sent -32042.
	res, err := formOnly.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "connect", Arguments: map[string]any{"id": "e-2"}})
	if errors.As(err, &rpcErr) && rpcErr.Code == worker.CodeURLElicitationRequired {
		t.Fatalf("a form-only client got -32042")
	}
	if err == nil && !res.IsError {
		t.Fatalf("a form-only client's call succeeded: %+v", res)
	}
	if w.CompleteElicitation("e-2") {
		t.Error("an elicitation never sent was completed")
	}

	if !w.CompleteElicitation("e-1") {
		t.Fatal("CompleteElicitation(e-1) = false, want true")
	}
	select {
	case id := <-asked.complete:
		if id != "e-1" {
			t.Fatalf("the asked session heard elicitation %q complete, want e-1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the asked session never heard notifications/elicitation/complete")
	}
	if w.CompleteElicitation("e-1") {
		t.Error("an elicitation was completed twice")
	}
	// The other session, on the other replica, is asked e-3 and hears its
	// completion; had e-1's reached it, that would have come first (the
	// notifications travel in order).
	if _, err := other.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "connect", Arguments: map[string]any{"id": "e-3"}}); !errors.As(err, &rpcErr) {
		t.Fatalf("the other session's call answered %v, want -32042", err)
	}
	if !w.CompleteElicitation("e-3") {
		t.Fatal("CompleteElicitation(e-3) = false")
	}
	select {
	case id := <-other.complete:
		if id != "e-3" {
			t.Fatalf("the other session heard elicitation %q complete first, want e-3 (another session's completion reached it)", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other session never heard e-3 complete")
	}
	select {
	case id := <-formOnly.complete:
		t.Fatalf("the form-only session heard elicitation %q complete", id)
	default:
	}
}
