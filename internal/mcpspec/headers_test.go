package mcpspec

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

func TestNameParam(t *testing.T) {
	for method, want := range map[string]string{
		"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
		"tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId",
		"tools/list": "", "completion/complete": "", "subscriptions/listen": "",
	} {
		if got := NameParam(method); got != want {
			t.Errorf("NameParam(%q) = %q, want %q", method, got, want)
		}
	}
}

// Plain and well-formed sentinel values decode; a character no header
// carries, or a sentinel of bad Base64, is refused.
func TestDecodeHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"echo":                            "echo",
		"=?base64?ZWNobw==?=":             "echo",
		"=?base64?ZmlsZTovLy9hIGLDqQ==?=": "file:///a b\u00e9",
		"=?base64?ZWNobw==":               "=?base64?ZWNobw==", // no closing sentinel: literal
		"a\tb":                            "a\tb",
	} {
		if got, ok := DecodeHeaderValue(in); !ok || got != want {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"=?base64?ZWNobw?=" /* padding is required */, "=?base64?ZWNobx==?=" /* stray bits: not canonical */, "=?base64?!!?=", "a\x00b", "caf\u00e9"} {
		if got, ok := DecodeHeaderValue(in); ok {
			t.Errorf("DecodeHeaderValue(%q) = %q, ok; want refused", in, got)
		}
	}
}

// Header values from clients: decoding never panics, and a value that
// does not use the sentinel comes back as it was, unless it holds a
// character no header may carry, which is refused.
func FuzzDecodeHeaderValue(f *testing.F) {
	for _, s := range []string{"echo", "=?base64?ZWNobw==?=", "=?base64?", "=?base64?!!?=", "", "a\x00b", "=?base64?SGVsbG8?="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := DecodeHeaderValue(v)
		unsafe := strings.IndexFunc(v, func(r rune) bool { return (r < 0x20 || r > 0x7e) && r != '\t' }) >= 0
		sentinel := len(v) >= len("=?base64??=") && strings.HasPrefix(v, "=?base64?") && strings.HasSuffix(v, "?=")
		switch {
		case unsafe && ok:
			t.Fatalf("%q has a character no header carries, yet decoded as %q", v, got)
		case !unsafe && !sentinel && (!ok || got != v):
			t.Fatalf("%q decoded as %q, %v", v, got, ok)
		}
	})
}

// Annotations reachable through properties keys are found, nested ones
// with their whole path; one under items or anyOf is not.
func TestParamHeaders(t *testing.T) {
	schema := `{"type":"object","properties":{
		"region":{"type":"string","x-mcp-header":"Region"},
		"opts":{"type":"object","properties":{"verbose":{"type":"boolean","x-mcp-header":"Verbose"}}},
		"list":{"type":"array","items":{"type":"object","properties":{"x":{"x-mcp-header":"X"}}}},
		"either":{"anyOf":[{"x-mcp-header":"Either"}]},
		"plain":{"type":"number"}}}`
	got := map[string]string{}
	for _, p := range ParamHeaders(json.RawMessage(schema)) {
		got[p.Name] = strings.Join(p.Path, ".")
	}
	want := map[string]string{"Region": "region", "Verbose": "opts.verbose"}
	if !maps.Equal(got, want) {
		t.Fatalf("ParamHeaders = %v, want %v", got, want)
	}
	if ParamHeaders(json.RawMessage(`not json`)) != nil {
		t.Fatal("a schema that is not JSON has headers")
	}
}

func TestParamHeaderArgument(t *testing.T) {
	args := json.RawMessage(`{"region":"eu","opts":{"verbose":true,"none":null},"n":3}`)
	for path, want := range map[string]string{
		"region": `"eu"`, "opts.verbose": `true`, "n": `3`,
		"opts.none": "", "missing": "", "region.deeper": "", "opts.verbose.x": "",
	} {
		if got := (ParamHeader{Path: strings.Split(path, ".")}).Argument(args); string(got) != want {
			t.Errorf("Argument at %s = %s, want %s", path, got, want)
		}
	}
}

func TestParamMatches(t *testing.T) {
	for _, tc := range []struct {
		header, arg string
		want        bool
	}{
		{"eu", `"eu"`, true},
		{"EU", `"eu"`, false},
		{"true", `true`, true},
		{"True", `true`, false},
		{"3", `3`, true},
		{"3.0", `3`, true},
		{"1e3", `1000`, true},
		{"4", `3`, false},
		{"NaN", `3`, false},
		{`{"a":1}`, `{"a":1}`, false}, // never mirrored
		{"[1]", `[1]`, false},
		{"x", `not json`, false},
	} {
		if got := ParamMatches(tc.header, json.RawMessage(tc.arg)); got != tc.want {
			t.Errorf("ParamMatches(%q, %s) = %v, want %v", tc.header, tc.arg, got, tc.want)
		}
	}
}
