package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
)

// The OAuth flags refuse contradictory or incomplete settings as usage
// errors, and configure nothing unless asked.
func TestOAuthFlags(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(policy, []byte(`{"required":["mcp"]}`), 0o600)
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--public-url", "mcp.example.com/mcp"}, "not an http(s) URL"},
		{[]string{"--jwks-url", "https://idp/keys"}, "need --jwt-issuer"},
		{[]string{"--jwt-issuer", "https://idp"}, "--jwt-audience or --public-url"},
		{[]string{"--jwt-issuer", "https://idp", "--jwks-url", "https://idp/k", "--jwks-file", "f", "--public-url", "https://m/mcp"}, "not both"},
		{[]string{"--request-rate", "-1"}, "must not be negative"},
		{[]string{"--auth-policy", policy + ".missing"}, "--auth-policy"},
		{[]string{"--public-url", "https://mcp.example.com/mcp", "--jwt-issuer", "https://idp", "--auth-policy", policy, "--request-rate", "5"}, ""},
	} {
		o := &gatewayFlags{}
		f := cmdline.NewFlags(cmdline.Streams{}, "gateway", "")
		o.register(f, true)
		if err := f.FlagSet.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := o.check()
		if c.err == "" {
			if err != nil {
				t.Errorf("%q: %v", c.args, err)
				continue
			}
			a := o.oauth.options(o)
			if a == nil || a.Resource != "https://mcp.example.com/mcp" || a.AuthorizationServers[0] != "https://idp" || a.Requests.Rate != 5 || a.Policy == nil {
				t.Errorf("%q: options %+v", c.args, a)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: %v, want %q", c.args, err, c.err)
		}
	}
	o := &gatewayFlags{}
	if o.oauth.options(o) != nil {
		t.Error("options without any OAuth flag")
	}
}
