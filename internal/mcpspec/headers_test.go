package mcpspec

import (
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
