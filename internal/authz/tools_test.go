package authz

import (
	"slices"
	"testing"
)

// Every matching rule adds its scopes, Missing is Needed less what is
// granted, and the lists decide by principal with "*" for the others.
func TestToolPolicyDecide(t *testing.T) {
	p, err := ParseToolPolicy([]byte(`{
		"required": ["mcp"],
		"methods": {"tools/call": ["mcp:call"]},
		"tools": {"admin-*": ["tools:admin"], "admin-reset": ["tools:reset"]},
		"resources": {"file:///secret/*": ["files:secret"]},
		"principals": {"alice": {"allow": ["echo", "admin-*"], "deny": ["admin-reset"]}, "*": {"deny": ["admin-*"]}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name            string
		r               Request
		denied          bool
		needed, missing []string
	}{
		{"list", Request{Principal: "bob", Method: "tools/list", Granted: []string{"mcp"}}, false, []string{"mcp"}, nil},
		{"echo, no scope", Request{Principal: "alice", Method: "tools/call", Tool: "echo"}, false, []string{"mcp", "mcp:call"}, []string{"mcp", "mcp:call"}},
		{"admin, one scope short", Request{Principal: "alice", Method: "tools/call", Tool: "admin-reset", Granted: []string{"mcp", "mcp:call", "tools:admin"}},
			true, []string{"mcp", "mcp:call", "tools:admin", "tools:reset"}, []string{"tools:reset"}},
		{"bob's admin", Request{Principal: "bob", Method: "tools/call", Tool: "admin-x", Granted: []string{"mcp", "mcp:call", "tools:admin"}}, true, []string{"mcp", "mcp:call", "tools:admin"}, nil},
		{"bob's spin", Request{Principal: "bob", Method: "tools/call", Tool: "spin", Granted: []string{"mcp", "mcp:call"}}, false, []string{"mcp", "mcp:call"}, nil},
		{"carol's echo (not in alice's allow list)", Request{Principal: "carol", Method: "tools/call", Tool: "echo", Granted: []string{"mcp", "mcp:call"}}, false, []string{"mcp", "mcp:call"}, nil},
		{"alice's sleep", Request{Principal: "alice", Method: "tools/call", Tool: "sleep", Granted: []string{"mcp", "mcp:call"}}, true, []string{"mcp", "mcp:call"}, nil},
		{"secret file", Request{Principal: "bob", Method: "resources/read", Resource: "file:///secret/a", Granted: []string{"mcp"}}, false, []string{"files:secret", "mcp"}, []string{"files:secret"}},
	} {
		d := p.Decide(c.r)
		if (d.Denied != "") != c.denied || !slices.Equal(d.Needed, c.needed) || !slices.Equal(d.Missing, c.missing) {
			t.Errorf("%s: %+v", c.name, d)
		}
	}
	if got := p.Scopes(); !slices.Equal(got, []string{"files:secret", "mcp", "mcp:call", "tools:admin", "tools:reset"}) {
		t.Errorf("Scopes = %q", got)
	}
	var none *ToolPolicy
	if d := none.Decide(Request{Tool: "x"}); d.Denied != "" || d.Needed != nil {
		t.Errorf("a nil policy decided %+v", d)
	}
	for _, bad := range []string{`{"tool": {}}`, `{"tools": {"[": ["x"]}}`, `{"principals": {"a": {"allow": ["["]}}}`} {
		if _, err := ParseToolPolicy([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", bad)
		}
	}
}
