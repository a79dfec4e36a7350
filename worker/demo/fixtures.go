package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// A one-pixel PNG and a tiny WAV, for the content-type fixtures.
var (
	pixelPNG = []byte{
		0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
		0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
		0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
		0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
		0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
	}
	silentWAV = []byte("RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00")
)

var noArgs = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)

// RegisterFixtures registers the test_* tools the MCP conformance suite's
// server scenarios call. They are for conformance runs, not for users.
func RegisterFixtures(w *worker.Worker) {
	fixture := func(name, desc string, h worker.Handler) {
		w.Handle(worker.Tool{Name: name, Description: desc, InputSchema: noArgs}, h)
	}
	fixture("test_simple_text", "Returns a simple text content block.", fixed(worker.Text("This is a simple text response for testing.")))
	fixture("test_image_content", "Returns an image content block.", fixed(&worker.Result{Content: []mcp.Content{image()}}))
	fixture("test_audio_content", "Returns an audio content block.", fixed(&worker.Result{Content: []mcp.Content{
		&mcp.AudioContent{Data: silentWAV, MIMEType: "audio/wav"},
	}}))
	fixture("test_embedded_resource", "Returns an embedded resource.", fixed(&worker.Result{Content: []mcp.Content{resource()}}))
	fixture("test_multiple_content_types", "Returns text, an image and a resource.", fixed(&worker.Result{Content: []mcp.Content{
		&mcp.TextContent{Text: "Multiple content types test:"}, image(), resource(),
	}}))
	fixture("test_error_handling", "Always fails with a tool error.", fixed(worker.Errorf("This tool intentionally returns an error for testing")))
	fixture("test_tool_with_logging", "Sends three log messages while it runs.", withLogging)
	fixture("test_tool_with_progress", "Reports progress three times.", withProgress)
	registerDiagnostics(w)
	registerAsking(w)
	registerFixtureOffers(w)
	registerTaskFixtures(w)
}

func fixed(r *worker.Result) worker.Handler {
	return func(context.Context, *worker.Call) (*worker.Result, error) { return r, nil }
}

func image() mcp.Content { return &mcp.ImageContent{Data: pixelPNG, MIMEType: "image/png"} }

func resource() mcp.Content {
	return &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
		URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content.",
	}}
}

func withLogging(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.Log("info", "conformance", fmt.Sprintf("%s (%d of 3)", msg, i+1))
		if err := sleepUntil(ctx, timeAfter(50)); err != nil {
			return nil, err
		}
	}
	return worker.Text("Tool with logging executed successfully"), nil
}

func withProgress(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	for i := range 3 {
		c.Progress(float64(i*50), 100, fmt.Sprintf("step %d of 3", i+1))
		if err := sleepUntil(ctx, timeAfter(50)); err != nil {
			return nil, err
		}
	}
	return worker.Text("Tool with progress executed successfully"), nil
}

func timeAfter(ms int) time.Time { return time.Now().Add(time.Duration(ms) * time.Millisecond) }

// The diagnostic tools the conformance suite's 2026-07-28 server
// scenarios name, beside the content fixtures. Each probes one rule of
// the gateway rather than doing work.

// requiresSampling marks a tool that needs the client's sampling
// capability: the gateway refuses its 2026-07-28 calls from clients that
// did not declare it (-32021), before the call starts.
var requiresSampling = json.RawMessage(`{"io.mcpcancel/requiredClientCapabilities":{"sampling":{}}}`)

// schema2020 is the suite's JSON Schema 2020-12 tool schema, which the
// gateway must pass through unchanged.
var schema2020 = json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
	`"$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},` +
	`"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},"contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},` +
	`"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],` +
	`"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},"then":{"required":["phone"]},"else":{"required":["email"]},` +
	`"additionalProperties":false}`)

// headerSchema mirrors three arguments into Mcp-Param-* headers.
var headerSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"region":{"type":"string","x-mcp-header":"Region"},` +
	`"priority":{"type":"integer","x-mcp-header":"Priority"},` +
	`"verbose":{"type":"boolean","x-mcp-header":"Verbose"},` +
	`"query":{"type":"string"}},"required":["region"]}`)

func registerDiagnostics(w *worker.Worker) {
	w.Handle(worker.Tool{
		Name: "test_missing_capability", Description: "Needs the client's sampling capability.",
		InputSchema: noArgs, Annotations: requiresSampling,
	}, fixed(worker.Errorf("test_missing_capability needs sampling, which this gateway does not relay yet")))
	w.Handle(worker.Tool{
		Name: "test_streaming_elicitation", Description: "Answers on its response stream without sending the client any request.",
		InputSchema: noArgs,
	}, fixed(worker.Text("No request was sent on this stream: a 2026-07-28 server asks for input with an input_required result.")))
	w.Handle(worker.Tool{Name: "test_logging_tool", Description: "Sends three log messages while it runs.", InputSchema: noArgs}, withLogging)
	w.Handle(worker.Tool{
		Name: "json_schema_2020_12_tool", Description: "Tool with JSON Schema 2020-12 features", InputSchema: schema2020,
	}, fixed(worker.Text("The schema reached the client unchanged.")))
	w.Handle(worker.Tool{
		Name: "test_custom_headers", Description: "Mirrors region, priority and verbose into Mcp-Param-* headers.", InputSchema: headerSchema,
	}, echoArguments)
	var added atomic.Int64
	w.Handle(worker.Tool{
		Name: "test_trigger_tool_change", Description: "Adds a tool, so that the tool list changes.", InputSchema: noArgs,
	}, func(context.Context, *worker.Call) (*worker.Result, error) {
		name := fmt.Sprintf("test_added_tool_%d", added.Add(1))
		w.Handle(worker.Tool{Name: name, Description: "Added by test_trigger_tool_change.", InputSchema: noArgs},
			fixed(worker.Text(name)))
		return worker.Text("added " + name), nil
	})
}

func echoArguments(_ context.Context, c *worker.Call) (*worker.Result, error) {
	return worker.Text(string(c.Arguments)), nil
}
