package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// The task fixtures that ask their client (the conformance suite's
// tasks-mrtr-input, tasks-mrtr-composition and
// tasks-dispatch-and-envelope): a task that waits for one answer, one
// that waits for two at once, and a tool that gathers its input before it
// becomes a task.
func registerTaskInputFixtures(w *worker.Worker) {
	w.Handle(worker.Tool{
		Name: "confirm_delete", Description: "Asks its user to confirm, then deletes the file (pretends to); runs as a task when the client can.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"filename":{"type":"string"}},"required":["filename"]}`),
		TaskSupport: worker.TaskOptional,
	}, confirmDelete)
	w.Handle(worker.Tool{
		Name: "multi_input", Description: "Asks its user two things at once; runs as a task when the client can.",
		InputSchema: noArgs, TaskSupport: worker.TaskOptional,
	}, multiInput)
	w.Handle(worker.Tool{
		Name: "test_tool_with_task", Description: "Asks its user's name, then greets them as a task.",
		InputSchema: noArgs, TaskSupport: worker.TaskRequired, DeferTask: true,
	}, greetAsTask)
}

var confirmSchema = json.RawMessage(`{"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}`)

func confirmDelete(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	var a struct {
		Filename string `json:"filename"`
	}
	if err := c.Bind(&a); err != nil {
		return worker.Errorf("%v", err), nil
	}
	r, err := c.Elicit(worker.WithInputKey(ctx, "confirm"), &mcp.ElicitParams{
		Message: fmt.Sprintf("Delete %s?", a.Filename), RequestedSchema: confirmSchema})
	if err != nil {
		return answerless(ctx, err)
	}
	if r.Action != "accept" || r.Content["confirm"] != true {
		return worker.Text(fmt.Sprintf("kept %s (action %s)", a.Filename, r.Action)), nil
	}
	return worker.Text(fmt.Sprintf("deleted %s", a.Filename)), nil
}

func multiInput(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	answers, errs := c.AskAll(ctx,
		worker.Input{Key: "name", Method: "elicitation/create", Params: mustJSON(&mcp.ElicitParams{Mode: "form", Message: "What is your name?", RequestedSchema: nameSchema})},
		worker.Input{Key: "confirm", Method: "elicitation/create", Params: mustJSON(&mcp.ElicitParams{Mode: "form", Message: "Go ahead?", RequestedSchema: confirmSchema})},
	)
	for _, err := range errs {
		if err != nil {
			return answerless(ctx, err)
		}
	}
	return worker.Text(fmt.Sprintf("got both answers: %s and %s", answers[0], answers[1])), nil
}

// greetAsTask gathers its user's name (input_required rounds on
// tools/call, for a 2026-07-28 client), then goes on as a task.
func greetAsTask(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	r, err := c.Elicit(worker.WithInputKey(ctx, "user_name"), &mcp.ElicitParams{Message: "What is your name?", RequestedSchema: nameSchema})
	if err != nil {
		return answerless(ctx, err)
	}
	if err := c.StartTask(ctx); err != nil && !errors.Is(err, worker.ErrNoTask) {
		return nil, err // the call goes on as a task; this round is over
	}
	return worker.Text(fmt.Sprintf("Hello, %v! (greeted in a task)", r.Content["name"])), nil
}

// answerless is a handler's end when its client's answer did not come:
// the call's own end, or a tool error saying why.
func answerless(ctx context.Context, err error) (*worker.Result, error) {
	if errors.Is(err, worker.ErrCallEnded) || ctx.Err() != nil {
		return nil, err
	}
	return worker.Errorf("asking the client failed: %v", err), nil
}
