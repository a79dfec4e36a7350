package upstream

import (
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{
		"allow": ["echo", "trigger-*", "get-env"],
		"deny": ["get-env"],
		"tools": {"*": {"timeout": "5m"}, "echo": {"timeout": "10s", "idempotent": true}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]bool{
		"echo": true, "trigger-long-running-operation": true, "get-env": false, "get-sum": false,
	} {
		if got := c.Exposed(tool); got != want {
			t.Errorf("Exposed(%q) = %v, want %v", tool, got, want)
		}
	}
	if tc := c.Tool("echo"); time.Duration(tc.Timeout) != 10*time.Second || !tc.Idempotent {
		t.Errorf("echo options %+v", tc)
	}
	if tc := c.Tool("other"); time.Duration(tc.Timeout) != 5*time.Minute || tc.Idempotent {
		t.Errorf("default options %+v", tc)
	}
	if !(&Config{}).Exposed("anything") {
		t.Error("an empty config must expose every tool")
	}
	if (&Config{}).Tool("x") != (ToolConfig{}) {
		t.Error("an empty config must give zero options")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, bad := range []string{
		`{"alow": ["x"]}`,
		`{"tools": {"x": {"timeout": 5}}}`,
		`{"tools": {"x": {"timeout": "-1s"}}}`,
		`{"tools": {"x": {"timeout": "soon"}}}`,
		`{"deny": ["[x"]}`,
		`{} {}`,
		`[]`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) = nil error", bad)
		}
	}
}
