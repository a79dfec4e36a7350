package demo

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// The conformance suite's fixtures that ask the client: sampling and
// elicitation (2025-11-25 tools-call-sampling, tools-call-elicitation,
// elicitation-sep1034-defaults, elicitation-sep1330-enums).
func registerToward(w *worker.Worker) {
	w.Handle(worker.Tool{Name: "test_sampling", Description: "Asks the client's model to answer a prompt.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"}},"required":["prompt"]}`)}, sampling)
	w.Handle(worker.Tool{Name: "test_elicitation", Description: "Asks the client's user for a username and email.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`)}, elicitation)
	w.Handle(worker.Tool{Name: "test_elicitation_sep1034_defaults", Description: "Elicits fields with default values.", InputSchema: noArgs},
		elicitWith(sep1034Schema))
	w.Handle(worker.Tool{Name: "test_elicitation_sep1330_enums", Description: "Elicits every kind of enum.", InputSchema: noArgs},
		elicitWith(sep1330Schema))
}

func sampling(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	var a struct {
		Prompt string `json:"prompt"`
	}
	if err := c.Bind(&a); err != nil {
		return worker.Errorf("%v", err), nil
	}
	r, err := c.Sample(ctx, &mcp.CreateMessageParams{
		Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Prompt}}},
		MaxTokens: 100,
	})
	if err != nil {
		return worker.Errorf("sampling failed: %v", err), nil
	}
	text := ""
	if t, ok := r.Content.(*mcp.TextContent); ok {
		text = t.Text
	}
	return worker.Text("LLM response: " + text), nil
}

var elicitationSchema = json.RawMessage(`{"type":"object","properties":{
"username":{"type":"string","description":"User's response"},
"email":{"type":"string","description":"User's email address"}},"required":["username","email"]}`)

func elicitation(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	var a struct {
		Message string `json:"message"`
	}
	if err := c.Bind(&a); err != nil {
		return worker.Errorf("%v", err), nil
	}
	r, err := c.Elicit(ctx, &mcp.ElicitParams{Message: a.Message, RequestedSchema: elicitationSchema})
	if err != nil {
		return worker.Errorf("elicitation failed: %v", err), nil
	}
	content, _ := json.Marshal(r.Content)
	return worker.Text(fmt.Sprintf("User response: action=%s, content=%s", r.Action, content)), nil
}

var sep1034Schema = json.RawMessage(`{"type":"object","properties":{
"name":{"type":"string","default":"John Doe"},
"age":{"type":"integer","default":30},
"score":{"type":"number","default":95.5},
"status":{"type":"string","enum":["active","inactive","pending"],"default":"active"},
"verified":{"type":"boolean","default":true}}}`)

var sep1330Schema = json.RawMessage(`{"type":"object","properties":{
"untitledSingle":{"type":"string","enum":["option1","option2","option3"]},
"titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
"legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},
"untitledMulti":{"type":"array","items":{"type":"string","enum":["option1","option2","option3"]}},
"titledMulti":{"type":"array","items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}}`)

func elicitWith(schema json.RawMessage) worker.Handler {
	return func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		r, err := c.Elicit(ctx, &mcp.ElicitParams{Message: "Please review and update the form fields", RequestedSchema: schema})
		if err != nil {
			return worker.Errorf("elicitation failed: %v", err), nil
		}
		content, _ := json.Marshal(r.Content)
		return worker.Text(fmt.Sprintf("Elicitation completed: action=%s, content=%s", r.Action, content)), nil
	}
}
