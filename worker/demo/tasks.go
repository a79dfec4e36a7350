package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcpcancel/mcpcancel/worker"
)

// The task fixtures the conformance suite's tasks-* scenarios (the
// io.modelcontextprotocol/tasks extension) name: a sync tool, and tools
// that run as MCP tasks.
func registerTaskFixtures(w *worker.Worker) {
	w.Handle(worker.Tool{
		Name: "greet", Description: "Says hello; never a task.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`),
	}, greet)
	w.Handle(worker.Tool{
		Name: "slow_compute", Description: "Works for the given seconds, then answers; runs as a task when the client can.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"seconds":{"type":"number"},"label":{"type":"string"}}}`),
		TaskSupport: worker.TaskOptional,
	}, slowCompute)
	w.Handle(worker.Tool{
		Name: "failing_job", Description: "Fails with a tool error after about a second; runs only as a task.",
		InputSchema: noArgs, TaskSupport: worker.TaskRequired,
	}, failingJob)
	w.Handle(worker.Tool{
		Name: "protocol_error_job", Description: "Fails as a protocol error (its handler panics); runs as a task.",
		InputSchema: noArgs, TaskSupport: worker.TaskOptional,
	}, func(context.Context, *worker.Call) (*worker.Result, error) { panic("protocol_error_job always fails") })
	registerTaskInputFixtures(w)
}

func greet(_ context.Context, c *worker.Call) (*worker.Result, error) {
	var a struct{ Name string }
	if err := c.Bind(&a); err != nil {
		return worker.Errorf("%v", err), nil
	}
	return worker.Text(fmt.Sprintf("Hello, %s!", a.Name)), nil
}

func slowCompute(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	var a struct {
		Seconds float64
		Label   string
	}
	if err := c.Bind(&a); err != nil {
		return worker.Errorf("%v", err), nil
	}
	if err := sleepUntil(ctx, time.Now().Add(time.Duration(a.Seconds*float64(time.Second)))); err != nil {
		return nil, err
	}
	return worker.Text(fmt.Sprintf("computed %s after %gs", a.Label, a.Seconds)), nil
}

func failingJob(ctx context.Context, _ *worker.Call) (*worker.Result, error) {
	if err := sleepUntil(ctx, time.Now().Add(time.Second)); err != nil {
		return nil, err
	}
	return worker.Errorf("failing_job failed, as it always does"), nil
}
