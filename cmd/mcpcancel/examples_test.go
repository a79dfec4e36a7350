package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
)

// parsers parse each role's flags as its command does, checks included,
// without starting anything.
var parsers = map[string]func(cmdline.Streams, []string) error{
	"coordinator": func(s cmdline.Streams, a []string) error { _, err := parseCoordinatorFlags(s, a); return err },
	"gateway":     func(s cmdline.Streams, a []string) error { _, err := parseGatewayFlags(s, a); return err },
	"worker":      func(s cmdline.Streams, a []string) error { _, err := parseWorkerFlags(s, a); return err },
	"dev":         func(s cmdline.Streams, a []string) error { _, err := parseDevFlags(s, a); return err },
}

// TestExampleConfigs reads every role's example --config file with the
// role's flags, so that an example never holds a key that is no flag or a
// value the command refuses.
func TestExampleConfigs(t *testing.T) {
	if _, err := exec.LookPath("npx"); err != nil {
		t.Fatal("the examples' servers run with npx, which comes with npm: install Node.js")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"config/coordinator.yaml", "config/gateway.yaml", "config/worker.yaml", "config/dev.yaml", "multi-server/dev.yaml"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("..", "..", "examples", file)
			role := strings.TrimSuffix(filepath.Base(file), ".yaml")
			if err := parsers[role](cmdline.Streams{}, []string{"--config", path}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(file, "config/") && !strings.Contains(string(doc), "```yaml\n"+string(b)+"```") {
				t.Errorf("docs/config.md does not show %s as it is", file)
			}
		})
	}
}

// TestExampleHostConfigs checks that the Claude Desktop and VS Code
// examples start `mcpcancel dev` with arguments it accepts, and that the
// HTTP one names dev's default MCP endpoint.
func TestExampleHostConfigs(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var claude struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
		} `json:"mcpServers"`
	}
	readJSON(t, filepath.Join(root, "examples", "claude-desktop", "claude_desktop_config.json"), &claude)
	var vscode struct {
		Servers map[string]struct {
			Type, Command, URL string
			Args               []string
		}
	}
	readJSON(t, filepath.Join(root, "examples", "vscode", ".vscode", "mcp.json"), &vscode)
	var devArgs [][]string
	for _, s := range claude.MCPServers {
		devArgs = append(devArgs, s.Args)
	}
	for name, s := range vscode.Servers {
		switch s.Type {
		case "stdio":
			devArgs = append(devArgs, s.Args)
		case "http":
			if s.URL != "http://127.0.0.1:7800/mcp" {
				t.Errorf("%s: url %q; want dev's default endpoint", name, s.URL)
			}
		default:
			t.Errorf("%s: type %q", name, s.Type)
		}
	}
	if len(devArgs) != 2 {
		t.Fatalf("%d stdio configurations; want Claude Desktop's and VS Code's", len(devArgs))
	}
	for _, args := range devArgs {
		if len(args) == 0 || args[0] != "dev" {
			t.Fatalf("args %q; want mcpcancel dev", args)
		}
		for i, a := range args {
			a = strings.ReplaceAll(a, "${workspaceFolder}", root)
			args[i] = strings.ReplaceAll(a, "/path/to/mcpcancel", root)
		}
		if err := parsers["dev"](cmdline.Streams{}, args[1:]); err != nil {
			t.Errorf("mcpcancel %s: %v", strings.Join(args, " "), err)
		}
	}
}

func readJSON(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
