package surface

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// inspector is the MCP Inspector 2.12.0's launcher (pinned in
// test/clients).
const inspector = "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"

// inspectorBound bounds one Inspector listing on the wire: from its
// first request to the gateway to the end of its last response. Issue 19
// asks for under 2 s (before the gateway tagged listen messages, the
// modern era hung 60 s). Node's own start, seconds on a shared machine,
// is logged beside it but not bounded.
const inspectorBound = 2 * time.Second

// TestInspectorModern: the MCP Inspector's CLI, in its modern
// (2026-07-28) protocol era, lists the tools, resources and prompts of
// the gateway's workers, each listing within inspectorBound on the wire.
func TestInspectorModern(t *testing.T) {
	s := startSystem(t, func(w *worker.Worker) {
		demo.Register(w)
		demo.RegisterFixtures(w)
	})
	env := append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "mcp.json"))
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
			clock := newWireClock(t, s.url)
			cmd := nodetest.Node(t, ctx, inspector, "--cli", clock.url, "--protocol-era", "modern",
				"--method", c.method, "--format", "json", "--quiet")
			cmd.Env = env
			start := time.Now()
			out, err := cmd.Output()
			total := time.Since(start)
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("inspector %s: %v\n%s\n%s", c.method, err, out, ee.Stderr)
				}
				t.Fatal(err)
			}
			onWire, requests := clock.span()
			t.Logf("the Inspector's %s took %v on the wire (%d requests), %v with node's start", c.method, onWire, requests, total)
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
			if onWire > inspectorBound {
				t.Errorf("the Inspector's %s took %v on the wire; want under %v", c.method, onWire, inspectorBound)
			}
		})
	}
}

// wireClock is a reverse proxy in front of the gateway that times the
// exchange: from the first request's arrival to the last response's end.
type wireClock struct {
	url string

	mu          sync.Mutex
	first, last time.Time
	requests    int
}

func newWireClock(t *testing.T, target string) *wireClock {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	c := &wireClock{}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	proxy.FlushInterval = -1 // event streams pass at once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		if c.requests == 0 {
			c.first = time.Now()
		}
		c.requests++
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
		c.mu.Lock()
		c.last = time.Now()
		c.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL + u.Path
	return c
}

func (c *wireClock) span() (time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.Sub(c.first), c.requests
}
