package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"time"
)

// Config is the per-tool configuration of an adapter, read from a JSON
// file by LoadConfig:
//
//	{
//	  "allow": ["echo", "trigger-*"],
//	  "deny":  ["get-env"],
//	  "tools": {
//	    "*":    {"timeout": "5m"},
//	    "echo": {"timeout": "10s", "idempotent": true}
//	  }
//	}
//
// allow and deny hold shell patterns (path.Match) of tool names: a tool is
// offered if allow is empty or one of its patterns matches, and none of
// deny's does. tools holds each tool's options by exact name; "*" holds
// the options of the tools not named.
type Config struct {
	Allow []string              `json:"allow,omitempty"`
	Deny  []string              `json:"deny,omitempty"`
	Tools map[string]ToolConfig `json:"tools,omitempty"`
}

// ToolConfig holds one tool's options.
type ToolConfig struct {
	// Timeout bounds a call to the tool: past it the call is cancelled
	// upstream and fails. 0 means none beyond the call's own deadline.
	Timeout Duration `json:"timeout,omitzero"`
	// Idempotent is the operator's word that the tool may safely run
	// twice: a call whose worker (or its server) is lost before any of its
	// progress reached the client is retried once, on another worker. The
	// server's own idempotentHint annotation is a hint and is not trusted
	// for this.
	Idempotent bool `json:"idempotent,omitempty"`
	// DurableBegin keeps a call of the tool from reaching the server
	// before its record is durable (worker.Tool.DurableBegin): for a tool
	// whose operators need a record before any side effect, at one
	// commit of latency.
	DurableBegin bool `json:"durable_begin,omitempty"`
}

// Duration is a time.Duration written as a string such as "30s".
type Duration time.Duration

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfig reads a config file. Unknown fields are errors, so a typo
// does not silently change nothing.
func LoadConfig(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

// ParseConfig parses a config.
func ParseConfig(b []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	c := &Config{}
	if err := dec.Decode(c); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("unexpected data after the config object")
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	return c, nil
}

// Check refuses a config whose allow or deny pattern does not parse; for
// a Config decoded elsewhere (such as one server of a worker's config
// file).
func (c *Config) Check() error {
	for _, p := range append(append([]string{}, c.Allow...), c.Deny...) {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("bad tool pattern %q: %w", p, err)
		}
	}
	return nil
}

// Exposed says whether the tool is offered.
func (c *Config) Exposed(tool string) bool {
	return (len(c.Allow) == 0 || matchAny(c.Allow, tool)) && !matchAny(c.Deny, tool)
}

// Tool returns a tool's options.
func (c *Config) Tool(name string) ToolConfig {
	if tc, ok := c.Tools[name]; ok {
		return tc
	}
	return c.Tools["*"]
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
