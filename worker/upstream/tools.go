package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// maxToolName is the coordinator's limit on a tool name, in bytes.
const maxToolName = 128

// registerTools lists the server's tools and makes them the worker's.
func (a *Adapter) registerTools(ctx context.Context, s *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.ConnectWait)
	defer cancel()
	var tools []worker.Tool
	seen := map[string]bool{}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing tools: %w", err)
		}
		if !a.opts.Config.Exposed(t.Name) {
			continue
		}
		wt, err := workerTool(t)
		if err == nil && seen[t.Name] {
			err = fmt.Errorf("tool %q listed twice", t.Name)
		}
		if err != nil {
			a.log.Warn("not offering an upstream tool", "tool", t.Name, "err", err)
			continue
		}
		seen[t.Name] = true
		tc := a.opts.Config.Tool(t.Name)
		wt.Idempotent, wt.DurableBegin = tc.Idempotent, tc.DurableBegin
		wt.TaskSupport = a.taskSupport.get(t.Name)
		tools = append(tools, wt)
	}
	a.reg.setTools(tools, a.handle)
	a.log.Info("registered the upstream's tools", "count", len(tools))
	a.once.Do(func() { close(a.ready) })
	return nil
}

// workerTool converts an MCP tool description, keeping its schemas and
// annotations as the server sent them.
func workerTool(t *mcp.Tool) (worker.Tool, error) {
	if err := checkToolName(t.Name); err != nil {
		return worker.Tool{}, err
	}
	wt := worker.Tool{Name: t.Name, Title: t.Title, Description: t.Description}
	var err error
	if wt.InputSchema, err = rawJSON(t.InputSchema); err != nil {
		return wt, fmt.Errorf("input schema: %w", err)
	}
	if wt.OutputSchema, err = rawJSON(t.OutputSchema); err != nil {
		return wt, fmt.Errorf("output schema: %w", err)
	}
	if t.Annotations != nil {
		if wt.Annotations, err = json.Marshal(t.Annotations); err != nil {
			return wt, fmt.Errorf("annotations: %w", err)
		}
	}
	if len(t.Meta) > 0 {
		if wt.Meta, err = json.Marshal(t.Meta); err != nil {
			return wt, fmt.Errorf("_meta: %w", err)
		}
	}
	return wt, nil
}

func rawJSON(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}

// checkToolName applies the coordinator's rule, so one odd upstream name
// cannot make the coordinator refuse the whole tool list.
func checkToolName(s string) error {
	if s == "" || len(s) > maxToolName || !utf8.ValidString(s) {
		return fmt.Errorf("a tool name must be 1 to %d bytes of UTF-8", maxToolName)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == '/' {
			return fmt.Errorf("tool name %q has a character mcpcancel does not allow", s)
		}
	}
	return nil
}
