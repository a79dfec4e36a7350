package coordinator_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Begin places a call that is not a tool call on a worker serving its
// target: a resource by its exact URI before a template that matches it,
// a prompt by name, a completion by the prompt or template it completes,
// subscriptions only on a worker that serves them, an event by its name.
// Nothing else serves a target: Begin refuses it as unknown. The record
// names the method.
func TestBeginRoutesByTarget(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	co := testcluster.StartCoordinator(t, cli, coordinator.Options{})
	c := co.Client(t)
	read := func(context.Context, *worker.Call) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	}
	get := func(context.Context, *worker.Call) (*mcp.GetPromptResult, error) { return &mcp.GetPromptResult{}, nil }
	testcluster.StartWorker(t, worker.Options{Coordinator: co.Addr, Name: "exact"}, func(w *worker.Worker) {
		w.HandleResource(&worker.Resource{URI: "x://a/1", Name: "one"}, read)
		w.HandlePrompt(&worker.Prompt{Name: "plain"}, get)
	})
	testcluster.StartWorker(t, worker.Options{Coordinator: co.Addr, Name: "template"}, func(w *worker.Worker) {
		w.HandleResourceTemplate(&worker.ResourceTemplate{URITemplate: "x://a/{id}", Name: "any"}, read)
		w.HandlePrompt(&worker.Prompt{Name: "completed"}, get)
		w.HandleCompletion(func(context.Context, *worker.Call) (*mcp.CompleteResult, error) { return &mcp.CompleteResult{}, nil })
		w.HandleSubscriptions(func(context.Context, *worker.Call) error { return nil })
	})
	testcluster.StartWorker(t, worker.Options{Coordinator: co.Addr, Name: "events"}, func(w *worker.Worker) {
		w.SetOffers(worker.Offers{Events: []*worker.EventType{{Name: "ticks", JSON: []byte(`{"name":"ticks","delivery":["poll","push"]}`)}}},
			func(context.Context, *worker.Call) (any, error) { return struct{}{}, nil })
	})
	for i, tc := range []struct {
		method, target, worker string // worker "" means unknown
	}{
		{"resources/read", "x://a/1", "exact"},
		{"resources/read", "x://a/2", "template"},
		{"resources/read", "x://b/1", ""},
		{"prompts/get", "plain", "exact"},
		{"prompts/get", "completed", "template"},
		{"prompts/get", "nope", ""},
		{"completion/complete", "ref/prompt:completed", "template"},
		{"completion/complete", "ref/prompt:plain", ""}, // its worker completes nothing
		{"completion/complete", "ref/resource:x://a/{id}", "template"},
		{"resources/subscribe", "x://a/2", "template"},
		{"resources/subscribe", "x://b/1", ""},
		{"events/poll", "ticks", "events"},
		{"events/stream", "ticks", "events"},
		{"events/poll", "nope", ""},
		{"prompts/get", "ticks", ""}, // an event type is not a prompt
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			k := key("conn:routes", num(int64(i+1)))
			resp, err := c.Begin(t.Context(), &pb.BeginRequest{Key: k, Method: tc.method, Tool: tc.target, Principal: "alice", Gateway: "g1"})
			if tc.worker == "" {
				if status.Code(err) != codes.NotFound {
					t.Fatalf("Begin = %v, %v; want NotFound", resp, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetWorker() != tc.worker {
				t.Errorf("placed on %s; want %s", resp.GetWorker(), tc.worker)
			}
			got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: resp.GetCallId()}})
			if err != nil {
				t.Fatal(err)
			}
			if m := got.GetCall().GetMethod(); m != tc.method {
				t.Errorf("the record names method %q; want %q", m, tc.method)
			}
		})
	}
}
