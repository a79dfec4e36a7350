package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// registerFixtureOffers registers the resources, the template, the
// prompts and the completion handler the conformance suite's resources-*,
// prompts-* and completion-* scenarios read, and the diagnostic tool
// test_trigger_prompt_change.
func registerFixtureOffers(w *worker.Worker) {
	text := func(uri, mime, body string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: body}}}
	}
	w.HandleResource(&worker.Resource{URI: "test://static-text", Name: "static-text", Description: "A static text resource.", MIMEType: "text/plain"},
		fixedResource(text("test://static-text", "text/plain", "This is the content of the static text resource.")))
	w.HandleResource(&worker.Resource{URI: "test://static-binary", Name: "static-binary", Description: "A static binary resource.", MIMEType: "image/png"},
		fixedResource(&mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://static-binary", MIMEType: "image/png", Blob: pixelPNG}}}))
	w.HandleResource(&worker.Resource{URI: "test://watched-resource", Name: "watched-resource", Description: "A resource to subscribe to.", MIMEType: "text/plain"},
		fixedResource(text("test://watched-resource", "text/plain", "Watched resource content.")))
	w.HandleResourceTemplate(&worker.ResourceTemplate{
		URITemplate: "test://template/{id}/data", Name: "template-data", Description: "Data for an id.", MIMEType: "application/json",
	}, func(_ context.Context, c *worker.Call) (*mcp.ReadResourceResult, error) {
		var id string
		fmt.Sscanf(c.URI(), "test://template/%s", &id)
		if n := len(id) - len("/data"); n >= 0 {
			id = id[:n]
		}
		return text(c.URI(), "application/json", fmt.Sprintf(`{"id":%q,"templateTest":true,"data":"Data for ID: %s"}`, id, id)), nil
	})
	registerFixturePrompts(w)
	w.HandleCompletion(func(_ context.Context, c *worker.Call) (*mcp.CompleteResult, error) {
		var p mcp.CompleteParams
		if err := c.BindParams(&p); err != nil {
			return nil, err
		}
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: completions(p)}}, nil
	})
	w.HandleSubscriptions(func(context.Context, *worker.Call) error { return nil })
}

func registerFixturePrompts(w *worker.Worker) {
	user := func(c mcp.Content) *mcp.PromptMessage { return &mcp.PromptMessage{Role: "user", Content: c} }
	w.HandlePrompt(&worker.Prompt{Name: "test_simple_prompt", Description: "A simple prompt without arguments."},
		fixedPrompt(&mcp.GetPromptResult{Messages: []*mcp.PromptMessage{user(&mcp.TextContent{Text: "This is a simple prompt for testing."})}}))
	w.HandlePrompt(&worker.Prompt{Name: "test_prompt_with_arguments", Description: "A prompt with two arguments.", Arguments: []*mcp.PromptArgument{
		{Name: "arg1", Description: "First test argument", Required: true},
		{Name: "arg2", Description: "Second test argument", Required: true},
	}}, func(_ context.Context, c *worker.Call) (*mcp.GetPromptResult, error) {
		var a struct{ Arg1, Arg2 string }
		if err := c.Bind(&a); err != nil {
			return nil, err
		}
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
			user(&mcp.TextContent{Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a.Arg1, a.Arg2)}),
		}}, nil
	})
	w.HandlePrompt(&worker.Prompt{Name: "test_prompt_with_embedded_resource", Description: "A prompt embedding a resource.", Arguments: []*mcp.PromptArgument{
		{Name: "resourceUri", Description: "URI of the resource to embed", Required: true},
	}}, func(_ context.Context, c *worker.Call) (*mcp.GetPromptResult, error) {
		var a struct {
			ResourceURI string `json:"resourceUri"`
		}
		if err := c.Bind(&a); err != nil {
			return nil, err
		}
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
			user(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: a.ResourceURI, MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
			user(&mcp.TextContent{Text: "Please process the embedded resource above."}),
		}}, nil
	})
	w.HandlePrompt(&worker.Prompt{Name: "test_prompt_with_image", Description: "A prompt with an image."},
		fixedPrompt(&mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
			user(image()), user(&mcp.TextContent{Text: "Please analyze the image above."}),
		}}))
	w.HandlePrompt(&worker.Prompt{Name: "test_input_required_result_prompt", Description: "A prompt that asks its user for context first (MRTR on prompts/get)."},
		contextPrompt)
	var added atomic.Int64
	w.Handle(worker.Tool{
		Name: "test_trigger_prompt_change", Description: "Adds a prompt, so that the prompt list changes.", InputSchema: noArgs,
	}, func(context.Context, *worker.Call) (*worker.Result, error) {
		name := fmt.Sprintf("test_added_prompt_%d", added.Add(1))
		w.HandlePrompt(&worker.Prompt{Name: name, Description: "Added by test_trigger_prompt_change."},
			fixedPrompt(&mcp.GetPromptResult{Messages: []*mcp.PromptMessage{user(&mcp.TextContent{Text: name})}}))
		return worker.Text("added " + name), nil
	})
}

// completions offers the values of the fixture prompt's arguments that
// start with what the client typed.
func completions(p mcp.CompleteParams) []string {
	var out []string
	for _, v := range []string{"test", "testing", "text"} {
		if p.Argument.Value == "" || len(v) >= len(p.Argument.Value) && v[:len(p.Argument.Value)] == p.Argument.Value {
			out = append(out, v)
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func fixedResource(r *mcp.ReadResourceResult) worker.ResourceHandler {
	return func(context.Context, *worker.Call) (*mcp.ReadResourceResult, error) { return r, nil }
}

func fixedPrompt(r *mcp.GetPromptResult) worker.PromptHandler {
	return func(context.Context, *worker.Call) (*mcp.GetPromptResult, error) { return r, nil }
}

var contextSchema = json.RawMessage(`{"type":"object","properties":{"context":{"type":"string"}},"required":["context"]}`)

// contextPrompt asks its client's user what context the prompt should
// use: a 2026-07-28 client gets an input_required result on prompts/get
// and retries with the answer; a 2025-era client is asked directly.
func contextPrompt(ctx context.Context, c *worker.Call) (*mcp.GetPromptResult, error) {
	r, err := c.Elicit(worker.WithInputKey(ctx, "user_context"), &mcp.ElicitParams{
		Message: "What context should the prompt use?", RequestedSchema: contextSchema})
	if err != nil {
		return nil, err
	}
	text := "No context was given."
	if v, ok := r.Content["context"].(string); ok && r.Action == "accept" {
		text = "Answer with this context in mind: " + v
	}
	return &mcp.GetPromptResult{Description: "A prompt built from its user's context",
		Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}}, nil
}
