package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

func noop(context.Context, *worker.Call) (*worker.Result, error) { return worker.Text("ok"), nil }

// TestSetToolsReregisters: SetTools on an attached worker replaces its
// tools at the coordinator, and the last of many quick changes is the one
// that stays.
func TestSetToolsReregisters(t *testing.T) {
	etcd := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, etcd.Client(), coordinator.Options{})
	w := testcluster.StartWorker(t, worker.Options{Coordinator: c.Addr}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "a"}, noop)
	})
	coord := c.Client(t)
	waitNames(t, coord, "a")

	w.SetTools([]worker.Tool{{Name: "b", Annotations: []byte(`{"readOnlyHint":true}`)}, {Name: "c"}}, noop)
	tools := waitNames(t, coord, "b", "c")
	if string(tools[0].GetAnnotationsJson()) != `{"readOnlyHint":true}` {
		t.Errorf("b's annotations %s", tools[0].GetAnnotationsJson())
	}
	for i := range 20 {
		w.SetTools([]worker.Tool{{Name: fmt.Sprintf("t%d", i)}}, noop)
	}
	waitNames(t, coord, "t19")
}

// waitNames polls until the coordinator offers exactly the named tools,
// and returns them sorted by name.
func waitNames(t *testing.T, coord pb.CoordinatorServiceClient, want ...string) []*pb.Tool {
	t.Helper()
	var tools []*pb.Tool
	testcluster.WaitFor(t, fmt.Sprintf("tools %v", want), func() bool {
		resp, err := coord.ListTools(t.Context(), &pb.ListToolsRequest{})
		if err != nil {
			return false
		}
		tools = resp.GetTools()
		slices.SortFunc(tools, func(a, b *pb.Tool) int {
			if a.GetName() < b.GetName() {
				return -1
			}
			return 1
		})
		var names []string
		for _, tool := range tools {
			names = append(names, tool.GetName())
		}
		return slices.Equal(names, want)
	})
	return tools
}

func TestSetToolsPanics(t *testing.T) {
	w := worker.New(worker.Options{Coordinator: "127.0.0.1:1"})
	for name, tools := range map[string][]worker.Tool{
		"no name":   {{Name: ""}},
		"duplicate": {{Name: "x"}, {Name: "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			w.SetTools(tools, noop)
		})
	}
}
