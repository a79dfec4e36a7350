package demo_test

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// TestServedByAWorker runs the registered tools through a real worker and
// coordinator: the tools are listed, and sleep sends one progress event
// per step before its result.
func TestServedByAWorker(t *testing.T) {
	etcd := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, etcd.Client(), coordinator.Options{})
	w := testcluster.StartWorker(t, worker.Options{Coordinator: c.Addr}, demo.Register)
	coord := c.Client(t)
	waitForTools(t, coord, "echo", "sleep", "spin")

	events := execute(t, coord, w.Client(t), "sleep", `{"seconds":0.05,"steps":5}`)
	if len(events) != 6 || events[5].GetResult() == nil {
		t.Fatalf("want 5 progress events then a result, got %v", events)
	}
	for i, e := range events[:5] {
		p := e.GetProgress()
		if p == nil || p.GetProgress() != float64(i+1) || p.GetTotal() != 5 {
			t.Fatalf("event %d = %v, want progress %d of 5", i, e, i+1)
		}
	}
	var res struct{ Content []struct{ Text string } }
	if err := json.Unmarshal(events[5].GetResult().GetResultJson(), &res); err != nil || len(res.Content) != 1 || res.Content[0].Text != "slept 0.05s" {
		t.Fatalf("result %s (%v), want the text %q", events[5].GetResult().GetResultJson(), err, "slept 0.05s")
	}
}

// waitForTools polls until the coordinator lists every tool in want.
func waitForTools(t *testing.T, coord pb.CoordinatorServiceClient, want ...string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		resp, err := coord.ListTools(t.Context(), &pb.ListToolsRequest{})
		if err == nil && hasTools(resp.GetTools(), want) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("tools %v not listed: %v, %v", want, resp.GetTools(), err)
		}
	}
}

func hasTools(tools []*pb.Tool, want []string) bool {
	var names []string
	for _, tool := range tools {
		names = append(names, tool.GetName())
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			return false
		}
	}
	return true
}

// execute begins a call (request id 1) with progress on and returns every event the
// worker sent for it.
func execute(t *testing.T, coord pb.CoordinatorServiceClient, wk pb.WorkerServiceClient, tool, args string) []*pb.ExecuteResponse {
	t.Helper()
	key := &pb.CallKey{Scope: "conn:test", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}}
	b, err := coord.Begin(t.Context(), &pb.BeginRequest{Key: key, Tool: tool})
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	stream, err := wk.Execute(t.Context(), &pb.ExecuteRequest{
		CallId: b.GetCallId(), Fence: b.GetFence(), Tool: tool, ArgumentsJson: []byte(args), Progress: true,
	})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	var events []*pb.ExecuteResponse
	for {
		e, err := stream.Recv()
		if err == io.EOF {
			return events
		}
		if err != nil {
			t.Fatalf("Execute stream after %s: %v", fmt.Sprint(events), err)
		}
		events = append(events, e)
	}
}
