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
func registerAsking(w *worker.Worker) {
	w.Handle(worker.Tool{Name: "test_sampling", Description: "Asks the client's model to answer a prompt.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"}},"required":["prompt"]}`)}, sampling)
	w.Handle(worker.Tool{Name: "test_elicitation", Description: "Asks the client's user for a username and email.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`)}, elicitation)
	w.Handle(worker.Tool{Name: "test_elicitation_sep1034_defaults", Description: "Elicits fields with default values.", InputSchema: noArgs},
		elicitWith(sep1034Schema))
	w.Handle(worker.Tool{Name: "test_elicitation_sep1330_enums", Description: "Elicits every kind of enum.", InputSchema: noArgs},
		elicitWith(sep1330Schema))
	registerInputRequired(w)
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

// The 2026-07-28 conformance fixtures (input-required-result-*). The same
// handler code serves both eras: a 2025 client is asked directly, a
// 2026-07-28 client through input_required results; the keys name the
// requests in inputRequests.
func registerInputRequired(w *worker.Worker) {
	fixture := func(name string, h worker.Handler) {
		w.Handle(worker.Tool{Name: name, Description: "Asks its client for input (MRTR conformance fixture).", InputSchema: noArgs}, h)
	}
	fixture("test_input_required_result_elicitation", func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		r, err := c.Elicit(worker.WithInputKey(ctx, "user_name"), &mcp.ElicitParams{Message: "What is your name?", RequestedSchema: nameSchema})
		if err != nil {
			return worker.Errorf("elicitation failed: %v", err), nil
		}
		return worker.Text(fmt.Sprintf("Hello, %v!", r.Content["name"])), nil
	})
	fixture("test_input_required_result_sampling", func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		r, err := c.Sample(worker.WithInputKey(ctx, "capital_question"), &mcp.CreateMessageParams{MaxTokens: 100,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "What is the capital of France?"}}}})
		if err != nil {
			return worker.Errorf("sampling failed: %v", err), nil
		}
		return worker.Text("The model answered: " + contentText(r.Content)), nil
	})
	fixture("test_input_required_result_list_roots", func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		r, err := c.Roots(worker.WithInputKey(ctx, "client_roots"))
		if err != nil {
			return worker.Errorf("roots/list failed: %v", err), nil
		}
		var uris []string
		for _, root := range r.Roots {
			uris = append(uris, root.URI)
		}
		return worker.Text(fmt.Sprintf("The client has %d roots: %v", len(uris), uris)), nil
	})
	confirm := func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		r, err := c.Elicit(worker.WithInputKey(ctx, "confirm"), &mcp.ElicitParams{Message: "Please confirm",
			RequestedSchema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)})
		if err != nil {
			return worker.Errorf("elicitation failed: %v", err), nil
		}
		return worker.Text(fmt.Sprintf("state-ok: confirmed=%v", r.Content["ok"])), nil
	}
	fixture("test_input_required_result_request_state", confirm)
	fixture("test_input_required_result_tampered_state", confirm)
	fixture("test_input_required_result_multiple_inputs", func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		answers, errs := c.AskAll(ctx,
			worker.Input{Key: "user_name", Method: "elicitation/create", Params: mustJSON(&mcp.ElicitParams{Mode: "form", Message: "What is your name?", RequestedSchema: nameSchema})},
			worker.Input{Key: "greeting", Method: "sampling/createMessage", Params: mustJSON(&mcp.CreateMessageParams{MaxTokens: 50,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Generate a greeting"}}}})},
			worker.Input{Key: "client_roots", Method: "roots/list"},
		)
		for _, err := range errs {
			if err != nil {
				return worker.Errorf("asking the client failed: %v", err), nil
			}
		}
		return worker.Text(fmt.Sprintf("Got all three: %s %s %s", answers[0], answers[1], answers[2])), nil
	})
	fixture("test_input_required_result_multi_round", func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		name, err := c.Elicit(worker.WithInputKey(ctx, "step1"), &mcp.ElicitParams{Message: "Step 1: What is your name?", RequestedSchema: nameSchema})
		if err != nil {
			return worker.Errorf("step 1 failed: %v", err), nil
		}
		color, err := c.Elicit(worker.WithInputKey(ctx, "step2"), &mcp.ElicitParams{Message: "Step 2: What is your favorite color?",
			RequestedSchema: json.RawMessage(`{"type":"object","properties":{"color":{"type":"string"}},"required":["color"]}`)})
		if err != nil {
			return worker.Errorf("step 2 failed: %v", err), nil
		}
		return worker.Text(fmt.Sprintf("%v likes %v", name.Content["name"], color.Content["color"])), nil
	})
	fixture("test_input_required_result_capabilities", func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		var caps map[string]json.RawMessage
		json.Unmarshal(c.ClientCapabilities(), &caps)
		var ask []worker.Input
		if _, ok := caps["sampling"]; ok {
			ask = append(ask, worker.Input{Key: "sample", Method: "sampling/createMessage", Params: mustJSON(&mcp.CreateMessageParams{MaxTokens: 10,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hi"}}}})})
		}
		if _, ok := caps["elicitation"]; ok {
			ask = append(ask, worker.Input{Key: "name", Method: "elicitation/create", Params: mustJSON(&mcp.ElicitParams{Mode: "form", Message: "Your name?", RequestedSchema: nameSchema})})
		}
		_, errs := c.AskAll(ctx, ask...)
		return worker.Text(fmt.Sprintf("asked %d requests the client declares; errors %v", len(ask), errs)), nil
	})
}

var nameSchema = json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func contentText(c mcp.Content) string {
	if t, ok := c.(*mcp.TextContent); ok {
		return t.Text
	}
	return ""
}
