package demo_test

import (
	"testing"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// TestTriggerToolChange: the conformance suite's test_trigger_tool_change
// changes the tool list that the coordinator serves, which is what makes
// gateways send tools list_changed.
func TestTriggerToolChange(t *testing.T) {
	etcd := etcdtest.Single(t)
	c := testcluster.StartCoordinator(t, etcd.Client(), coordinator.Options{})
	w := testcluster.StartWorker(t, worker.Options{Coordinator: c.Addr}, demo.RegisterFixtures)
	coord := c.Client(t)
	waitForTools(t, coord, "test_trigger_tool_change", "test_missing_capability", "test_custom_headers", "json_schema_2020_12_tool")
	events := execute(t, coord, w.Client(t), "test_trigger_tool_change", `{}`)
	if len(events) != 1 || events[0].GetResult() == nil {
		t.Fatalf("want a result, got %v", events)
	}
	waitForTools(t, coord, "test_added_tool_1")
}
