package clientcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutTools = `Lists the tools the live workers offer, with their arguments: each
argument's name, JSON type, default, and '*' if it is required. With
--json, the tools as MCP describes them (name, description, inputSchema).`

func RunTools(ctx context.Context, s cmdline.Streams, args []string) error {
	var coord string
	var asJSON bool
	var files tlsconfig.Files
	f := cmdline.NewFlags(s, "tools", aboutTools)
	f.StringVar(&coord, "coordinator", "127.0.0.1:7801", "coordinator `address`: HOST:PORT, dns:///NAME:PORT, or a comma-separated list")
	f.BoolVar(&asJSON, "json", false, "print the tools as JSON")
	f.TLS(&files)
	if err := f.Parse(args); err != nil {
		return err
	}
	conn, err := dialCoordinator(coord, files)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer conn.Close()
	resp, err := pb.NewCoordinatorServiceClient(conn).ListTools(ctx, &pb.ListToolsRequest{})
	if err != nil {
		return coordinatorErr(coord, err)
	}
	if asJSON {
		return printToolsJSON(s.Stdout, resp.GetTools())
	}
	return printTools(s.Stdout, resp.GetTools())
}

func printToolsJSON(w io.Writer, tools []*pb.Tool) error {
	type mcpTool struct {
		Name        string          `json:"name"`
		Title       string          `json:"title,omitempty"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	out := []mcpTool{}
	for _, t := range tools {
		schema := json.RawMessage(t.GetInputSchemaJson())
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		out = append(out, mcpTool{t.GetName(), t.GetTitle(), t.GetDescription(), schema})
	}
	return printJSON(w, out)
}

func printTools(w io.Writer, tools []*pb.Tool) error {
	if len(tools) == 0 {
		_, err := fmt.Fprintln(w, "no live worker offers any tool")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tARGUMENTS\tDESCRIPTION")
	for _, t := range tools {
		args := strings.Join(toolArgs(t.GetInputSchemaJson()), " ")
		if args == "" {
			args = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.GetName(), args, truncate(firstSentence(t.GetDescription()), 60))
	}
	return tw.Flush()
}

// toolArgs describes a JSON Schema's properties as name:type[=default],
// with '*' after a required one, in name order.
func toolArgs(schema []byte) []string {
	var s struct {
		Properties map[string]struct {
			Type    any             `json:"type"`
			Default json.RawMessage `json:"default"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return []string{"(unreadable schema)"}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[name]
		a := name
		if typ := fmt.Sprint(p.Type); p.Type != nil {
			a += ":" + typ
		}
		if slices.Contains(s.Required, name) {
			a += "*"
		}
		if len(p.Default) > 0 {
			a += "=" + string(p.Default)
		}
		out = append(out, a)
	}
	return out
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}
