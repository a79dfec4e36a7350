package surface

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// inspector is the MCP Inspector 2.12.0's launcher (pinned in
// test/clients).
const inspector = "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"

// inspectorBound is how much longer one Inspector listing may take than
// the Inspector's start alone (the same listing of a port nobody listens
// on, which fails at once; measured in the same run, it takes seconds on
// a loaded machine). Issue 19 asks for under 2 s; before
// the gateway tagged listen messages, the modern era hung 60 s.
const inspectorBound = 2 * time.Second

// TestInspectorModern: the MCP Inspector's CLI, in its modern
// (2026-07-28) protocol era, lists the tools, resources and prompts of
// the gateway's workers, each listing within inspectorBound of the
// Inspector's own start.
func TestInspectorModern(t *testing.T) {
	s := startSystem(t, func(w *worker.Worker) {
		demo.Register(w)
		demo.RegisterFixtures(w)
	})
	env := append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "mcp.json"))
	startup := inspectorStart(t, env)
	for _, c := range []struct {
		method, field, key, want string
	}{
		{"tools/list", "tools", "name", "echo"},
		{"resources/list", "resources", "uri", "test://static-text"},
		{"resources/templates/list", "resourceTemplates", "uriTemplate", "test://template/{id}/data"},
		{"prompts/list", "prompts", "name", "test_simple_prompt"},
	} {
		t.Run(c.method, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := nodetest.Node(t, ctx, inspector, "--cli", s.url, "--protocol-era", "modern",
				"--method", c.method, "--format", "json", "--quiet")
			cmd.Env = env
			start := time.Now()
			out, err := cmd.Output()
			took := time.Since(start)
			t.Logf("the Inspector's %s took %v, %v more than its start (%v)", c.method, took, took-startup, startup)
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("inspector %s: %v\n%s\n%s", c.method, err, out, ee.Stderr)
				}
				t.Fatal(err)
			}
			var res struct {
				Result map[string][]map[string]any `json:"result"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("inspector %s printed %q: %v", c.method, out, err)
			}
			var keys []any
			for _, e := range res.Result[c.field] {
				keys = append(keys, e[c.key])
			}
			if !slices.Contains(keys, any(c.want)) {
				t.Errorf("the Inspector's %s lists %v; want %s among them", c.method, keys, c.want)
			}
			if took-startup > inspectorBound {
				t.Errorf("the Inspector's %s took %v, %v more than its start; want under %v more", c.method, took, took-startup, inspectorBound)
			}
		})
	}
}

// inspectorStart is how long the Inspector's CLI takes to start, try a
// listing of a port nobody listens on, and exit: the least of three runs.
func inspectorStart(t *testing.T, env []string) time.Duration {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/mcp"
	l.Close()
	least := time.Duration(math.MaxInt64)
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		cmd := nodetest.Node(t, ctx, inspector, "--cli", closed, "--protocol-era", "modern", "--method", "tools/list", "--format", "json", "--quiet")
		cmd.Env = env
		start := time.Now()
		err := cmd.Run()
		cancel()
		if err == nil {
			t.Fatalf("the Inspector listed the tools of a closed port")
		}
		least = min(least, time.Since(start))
	}
	return least
}
