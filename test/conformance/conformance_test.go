// Package conformance runs the official MCP conformance suite's server
// scenarios against the real gateway, with a worker serving the suite's
// test_* fixture tools.
package conformance

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// The scenarios the gateway must pass. Sampling and elicitation need the
// server to send requests to the client on behalf of a worker, which the
// gateway does not relay; resources, prompts and completion are not
// tools, which is all the gateway fronts.
var scenarios = []string{
	"server-initialize",
	"ping",
	"logging-set-level",
	"tools-list",
	"tools-call-simple-text",
	"tools-call-image",
	"tools-call-audio",
	"tools-call-embedded-resource",
	"tools-call-mixed-content",
	"tools-call-with-logging",
	"tools-call-error",
	"tools-call-with-progress",
	"server-sse-multiple-streams",
	"dns-rebinding-protection",
}

var summary = regexp.MustCompile(`(?m)^Passed: (\d+)/\d+, (\d+) failed`)

func TestServerScenarios(t *testing.T) {
	nodetest.Install(t)
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "fixtures"}, func(w *worker.Worker) {
		demo.Register(w)
		demo.RegisterFixtures(w)
	})
	_, url := testcluster.StartGateway(t, coord.Client(t), gateway.Options{})
	for _, sc := range scenarios {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := nodetest.Node(t, ctx, "node_modules/@modelcontextprotocol/conformance/dist/index.js",
				"server", "--url", url, "--scenario", sc)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("conformance suite: %v\n%s", err, out)
			}
			m := summary.FindSubmatch(out)
			if m == nil {
				t.Fatalf("no summary from the conformance suite:\n%s", out)
			}
			passed, _ := strconv.Atoi(string(m[1]))
			failed, _ := strconv.Atoi(string(m[2]))
			if failed != 0 || passed == 0 {
				t.Fatalf("%d passed, %d failed:\n%s", passed, failed, out)
			}
		})
	}
}
