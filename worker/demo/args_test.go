package demo

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpcancel/mcpcancel/worker"
)

var tools = map[string]worker.Tool{"sleep": sleepTool, "echo": echoTool, "spin": spinTool}

// badArgs are arguments each tool must refuse with a tool error result,
// and that its input schema must refuse as well.
var badArgs = []struct{ tool, args, want string }{
	{"sleep", `{}`, "seconds is required"},
	{"sleep", `{"seconds":null}`, "seconds is required"},
	{"sleep", `{"seconds":-1}`, "seconds must be between 0 and 86400"},
	{"sleep", `{"seconds":86401}`, "seconds must be between"},
	{"sleep", `{"seconds":"1"}`, "invalid arguments: seconds: want a number, got a string"},
	{"sleep", `{"seconds":1,"steps":0}`, "steps must be between 1 and 10000"},
	{"sleep", `{"seconds":1,"steps":10001}`, "steps must be between"},
	{"sleep", `{"seconds":1,"steps":2.5}`, "steps must be an integer"},
	{"sleep", `{"seconds":1,"nap":true}`, `invalid arguments: unknown argument "nap"`},
	{"sleep", `[1]`, "invalid arguments: arguments: want an object, got an array"},
	{"sleep", `{"seconds":1,"steps":true}`, "steps: want a number, got a boolean"},
	{"echo", `{}`, "text is required"},
	{"echo", `{"text":5}`, "invalid arguments: text: want a string, got a number"},
	{"echo", `{"text":"a","more":"b"}`, `unknown argument "more"`},
	{"spin", `{"millis":{}}`, "millis: want a number, got an object"},
	{"spin", `{}`, "millis is required"},
	{"spin", `{"millis":-1}`, "millis must be between 0 and 600000"},
	{"spin", `{"millis":600001}`, "millis must be between"},
	{"spin", `{"millis":0.5}`, "millis must be an integer"},
}

func TestBadArguments(t *testing.T) {
	for _, tc := range badArgs {
		t.Run(tc.tool+tc.args, func(t *testing.T) {
			r, err := run(t.Context(), tc.tool, tc.args)
			if err != nil {
				t.Fatalf("want a tool error result, got Go error %v", err)
			}
			if !r.IsError {
				t.Fatalf("want a tool error result, got %+v", r)
			}
			if msg := onlyText(t, r); !strings.HasPrefix(msg, tc.tool+": ") || !strings.Contains(msg, tc.want) {
				t.Errorf("message %q, want %q prefixed by the tool name", msg, tc.want)
			}
		})
	}
}

// goodArgs are arguments each tool takes, and so must its schema.
var goodArgs = []struct{ tool, args, want string }{
	{"sleep", `{"seconds":0}`, "slept 0s"},
	{"sleep", `{"seconds":0,"steps":10000}`, "slept 0s"},
	{"sleep", `{"seconds":0.001,"steps":1.0}`, "slept 0.001s"},
	{"echo", `{"text":"hi"}`, "hi"},
	{"spin", `{"millis":0}`, "spun 0ms"},
	{"spin", `{"millis":2e0}`, "spun 2ms"},
}

func TestGoodArguments(t *testing.T) {
	for _, tc := range goodArgs {
		t.Run(tc.tool+tc.args, func(t *testing.T) {
			r, err := run(t.Context(), tc.tool, tc.args)
			if got := text(t, r, err); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSchemasAgreeWithHandlers checks that each input schema is a closed
// object schema and accepts and refuses what its handler does.
func TestSchemasAgreeWithHandlers(t *testing.T) {
	schemas := map[string]*jsonschema.Resolved{}
	for name, tool := range tools {
		schemas[name] = resolve(t, tool)
	}
	for _, tc := range badArgs {
		if err := schemas[tc.tool].Validate(instance(t, tc.args)); err == nil {
			t.Errorf("%s schema accepts %s", tc.tool, tc.args)
		}
	}
	for _, tc := range goodArgs {
		if err := schemas[tc.tool].Validate(instance(t, tc.args)); err != nil {
			t.Errorf("%s schema refuses %s: %v", tc.tool, tc.args, err)
		}
	}
}

func resolve(t *testing.T, tool worker.Tool) *jsonschema.Resolved {
	t.Helper()
	var s jsonschema.Schema
	if err := json.Unmarshal(tool.InputSchema, &s); err != nil {
		t.Fatalf("%s: schema is not JSON: %v", tool.Name, err)
	}
	var raw map[string]any
	json.Unmarshal(tool.InputSchema, &raw)
	if s.Type != "object" || raw["additionalProperties"] != false || len(s.Required) == 0 {
		t.Errorf("%s: want a closed object schema with required properties", tool.Name)
	}
	for _, r := range s.Required {
		if s.Properties[r] == nil {
			t.Errorf("%s: required %q is not a property", tool.Name, r)
		}
	}
	if tool.Description == "" || !slices.Contains([]string{"sleep", "echo", "spin"}, tool.Name) {
		t.Errorf("%s: want a description and a contract name", tool.Name)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("%s: %v", tool.Name, err)
	}
	return rs
}

func instance(t *testing.T, args string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatal(err)
	}
	return v
}
