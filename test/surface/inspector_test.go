package surface

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// inspector is the MCP Inspector 2.12.0's launcher (pinned in
// test/clients).
const inspector = "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"

// inspectorBound bounds the gateway's part of one Inspector listing: the
// time its requests spend in the gateway, from each one's arrival to its
// response's end. Issue 19 asks for the listing in under 2 s (before the
// gateway tagged listen messages, the modern era hung 60 s). The span on
// the wire (which adds the Inspector's own work between requests) and
// the wall time with node's start (seconds on a shared machine) are
// logged beside it.
const inspectorBound = 2 * time.Second

// TestInspectorModern: the MCP Inspector's CLI, in its modern
// (2026-07-28) protocol era, lists the tools, resources and prompts of
// the gateway's workers, each with its requests within inspectorBound in
// the gateway.
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
			clock := newWireClock(t, s.gw.Mux())
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
			onWire, inGateway, requests := clock.span()
			t.Logf("the Inspector's %s: %v in the gateway over %d requests, %v on the wire, %v with node's start", c.method, inGateway, requests, onWire, total)
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
				// Seen once under CI load, with only 2 requests (the
				// Inspector lists nothing the capabilities leave out):
				// say what the catalogue held then.
				t.Errorf("the Inspector's %s lists %v over %d requests; want %s among them (the coordinator's catalogue now: %s)",
					c.method, keys, requests, c.want, catalogueNow(t, s))
			}
			if inGateway > inspectorBound {
				t.Errorf("the Inspector's %s spent %v in the gateway; want under %v", c.method, inGateway, inspectorBound)
			}
		})
	}
}

// wireClock serves the gateway's handler on a listener of its own and
// times the exchange: from the first request's arrival to the last
// response's end, and the time requests spent in the gateway. (It used to
// be a reverse proxy in front of the gateway's own listener; twice in CI
// that proxy aborted a response on a connection of its own, and the
// Inspector saw "other side closed". Timing the handler needs no second
// hop.)
type wireClock struct {
	url string

	mu          sync.Mutex
	first, last time.Time
	inGateway   time.Duration
	requests    int
}

func newWireClock(t *testing.T, gateway http.Handler) *wireClock {
	t.Helper()
	c := &wireClock{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		c.mu.Lock()
		if c.requests == 0 {
			c.first = start
		}
		c.requests++
		c.mu.Unlock()
		gateway.ServeHTTP(w, r)
		c.mu.Lock()
		c.last = time.Now()
		c.inGateway += c.last.Sub(start)
		c.mu.Unlock()
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	c.url = srv.URL + "/mcp"
	return c
}

// span is the exchange's span on the wire, the time its requests spent
// in the gateway, and how many there were.
func (c *wireClock) span() (onWire, inGateway time.Duration, requests int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.Sub(c.first), c.inGateway, c.requests
}

// catalogueNow summarises what the coordinator's catalogue holds: tools,
// offers by kind, features.
func catalogueNow(t *testing.T, s *system) string {
	resp, err := s.coord.ListTools(t.Context(), &pb.ListToolsRequest{})
	if err != nil {
		return err.Error()
	}
	kinds := map[string]int{}
	for _, o := range resp.GetOffers() {
		kinds[o.GetKind().String()]++
	}
	return fmt.Sprintf("%d tools, offers %v, features %v", len(resp.GetTools()), kinds, resp.GetFeatures())
}
