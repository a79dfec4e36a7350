package authz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
)

// ToolPolicy decides what an MCP client may ask of the gateway: the OAuth
// scopes each request needs (for every request, per method, per tool and
// per resource URI), and per-principal allow and deny lists of tools. It
// is read from a JSON file:
//
//	{
//	  "required":  ["mcp"],
//	  "methods":   {"tools/call": ["mcp:tools"]},
//	  "tools":     {"echo": ["tools:echo"], "admin-*": ["tools:admin"]},
//	  "resources": {"file:///secret/*": ["files:secret"]},
//	  "principals": {
//	    "jwt:https://idp.example.com:alice": {"allow": ["echo", "sleep"]},
//	    "*": {"deny": ["admin-*"]}
//	  }
//	}
//
// Tool and resource keys are shell patterns (path.Match); every pattern
// that matches adds its scopes. A principal's entry, or "*" for those
// without one, lists tool patterns: a tool is allowed if allow is empty
// or one of its patterns matches, and none of deny's does.
type ToolPolicy struct {
	Required   []string            `json:"required,omitempty"`
	Methods    map[string][]string `json:"methods,omitempty"`
	Tools      map[string][]string `json:"tools,omitempty"`
	Resources  map[string][]string `json:"resources,omitempty"`
	Principals map[string]Access   `json:"principals,omitempty"`
}

// Access is one principal's allow and deny lists of tool patterns.
type Access struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Request is what a decision looks at.
type Request struct {
	Principal string
	Granted   []string // the scopes the caller's token grants
	Method    string
	Tool      string // tools/call's tool, or ""
	Resource  string // resources/read's URI, or ""
}

// Decision is a policy's answer. The request may go on only if both
// Denied and Missing are empty.
type Decision struct {
	// Denied says why a list refused the tool, for the client to read.
	Denied string
	// Needed are all the scopes the request needs (sorted); Missing those
	// of them not granted.
	Needed, Missing []string
}

// LoadToolPolicy reads a policy file.
func LoadToolPolicy(file string) (*ToolPolicy, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p, err := ParseToolPolicy(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// ParseToolPolicy parses a policy. Unknown fields are errors, so a typo
// does not silently open anything.
func ParseToolPolicy(b []byte) (*ToolPolicy, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	p := &ToolPolicy{}
	if err := dec.Decode(p); err != nil {
		return nil, err
	}
	var patterns []string
	for k := range p.Tools {
		patterns = append(patterns, k)
	}
	for k := range p.Resources {
		patterns = append(patterns, k)
	}
	for _, a := range p.Principals {
		patterns = append(append(patterns, a.Allow...), a.Deny...)
	}
	for _, pat := range patterns {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("bad pattern %q: %w", pat, err)
		}
	}
	return p, nil
}

// Decide answers r. A nil policy allows everything.
func (p *ToolPolicy) Decide(r Request) Decision {
	if p == nil {
		return Decision{}
	}
	var d Decision
	if r.Tool != "" && !p.allowed(r.Principal, r.Tool) {
		d.Denied = fmt.Sprintf("tool %q is not allowed for this principal", r.Tool)
	}
	needed := append(slices.Clone(p.Required), p.Methods[r.Method]...)
	needed = append(needed, matching(p.Tools, r.Tool)...)
	needed = append(needed, matching(p.Resources, r.Resource)...)
	d.Needed = sortedSet(needed)
	for _, s := range d.Needed {
		if !slices.Contains(r.Granted, s) {
			d.Missing = append(d.Missing, s)
		}
	}
	return d
}

// Scopes lists every scope the policy names, sorted.
func (p *ToolPolicy) Scopes() []string {
	if p == nil {
		return nil
	}
	all := slices.Clone(p.Required)
	for _, m := range []map[string][]string{p.Methods, p.Tools, p.Resources} {
		for _, ss := range m {
			all = append(all, ss...)
		}
	}
	return sortedSet(all)
}

func (p *ToolPolicy) allowed(principal, tool string) bool {
	a, ok := p.Principals[principal]
	if !ok {
		a = p.Principals["*"]
	}
	return (len(a.Allow) == 0 || matchAny(a.Allow, tool)) && !matchAny(a.Deny, tool)
}

// matching returns the scopes of every pattern of m that matches s.
func matching(m map[string][]string, s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	for pat, scopes := range m {
		if ok, _ := path.Match(pat, s); ok {
			out = append(out, scopes...)
		}
	}
	return out
}

func matchAny(patterns []string, s string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { ok, _ := path.Match(p, s); return ok })
}

func sortedSet(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	sort.Strings(ss)
	return slices.Compact(ss)
}
