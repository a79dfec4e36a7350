// Package conformance runs the official MCP conformance suite's server
// scenarios against the real gateway, with a worker serving the suite's
// fixture and diagnostic tools.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// suite is @modelcontextprotocol/conformance 0.2.0-alpha.12 (pinned in
// test/clients/conformance-next), run on the Node 22 it needs.
const suite = "node_modules/@modelcontextprotocol/conformance/dist/index.js"

// runTimeout bounds one requirement set's run; the suite bounds each
// scenario with scenarioTimeout. A whole run takes seconds today.
const (
	runTimeout      = 4 * time.Minute // a loaded 2-core host has needed more than 90 s
	scenarioTimeout = "15000"
)

// TestRequirements runs every scenario each revision requires, as frozen
// at its release, and compares the outcome with the expected failures in
// expected-failures-<revision>.yaml: only scenarios that need work of
// other issues may fail. A scenario that fails unexpectedly fails the
// test, and so does one in the baseline that now passes (so that the
// baseline only ever shrinks). It supersedes the run of the 0.1.13 suite,
// whose scenarios are all part of --requirements 2025-11-25.
func TestRequirements(t *testing.T) {
	url := startSystem(t)
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(revision, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
			defer cancel()
			baseline, err := filepath.Abs("expected-failures-" + revision + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			cmd := nodetest.NextNode(t, ctx, suite, "server", "--url", url,
				"--requirements", revision, "--expected-failures", baseline, "--timeout", scenarioTimeout)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the suite did not finish within %v:\n%s", runTimeout, out)
			}
			report(t, out, err)
		})
	}
}

// startSystem starts etcd, a coordinator, a worker with the demo and
// fixture tools, and a gateway; it returns the gateway's MCP URL.
func startSystem(t *testing.T) string {
	t.Helper()
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "fixtures"}, func(w *worker.Worker) {
		demo.Register(w)
		demo.RegisterFixtures(w)
	})
	_, url := testcluster.StartGateway(t, coord.Conn(t), gateway.Options{})
	return url
}

var (
	ansi       = regexp.MustCompile(`\x1b\[[0-9;]*m`)
	listed     = regexp.MustCompile(`^\s+[✗✓~] (\S+)`)
	unexpected = "Unexpected failures (not in baseline):"
	stale      = "Stale baseline entries (now passing - remove from baseline):"
)

// report fails the test, naming the scenarios, when the run did not match
// its baseline.
func report(t *testing.T, out []byte, runErr error) {
	t.Helper()
	text := ansi.ReplaceAllString(string(out), "")
	if !strings.Contains(text, "Baseline check passed") && runErr == nil {
		t.Fatalf("the suite did not check its baseline:\n%s", text)
	}
	failing, passing := section(text, unexpected), section(text, stale)
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		t.Fatalf("cannot run the suite: %v\n%s", runErr, text)
	}
	if len(failing) > 0 {
		t.Errorf("scenarios failing that are expected to pass: %s", strings.Join(failing, ", "))
	}
	if len(passing) > 0 {
		t.Errorf("scenarios passing that the baseline expects to fail (remove them from it): %s", strings.Join(passing, ", "))
	}
	if runErr != nil && len(failing)+len(passing) == 0 {
		t.Errorf("the suite failed (%v) without naming a scenario", runErr)
	}
	if t.Failed() {
		t.Logf("suite output:\n%s", summary(text))
	}
}

// section lists the scenarios (or scenario:check ids) under a heading of
// the suite's baseline report.
func section(text, heading string) []string {
	_, rest, ok := strings.Cut(text, heading)
	if !ok {
		return nil
	}
	var names []string
	for _, line := range strings.Split(rest, "\n")[1:] {
		m := listed.FindStringSubmatch(line)
		if m == nil {
			break
		}
		names = append(names, m[1])
	}
	return names
}

// summary is the output from the suite's summary on, or all of it.
func summary(text string) string {
	if i := strings.Index(text, "=== SUMMARY ==="); i >= 0 {
		return text[i:]
	}
	return string(bytes.TrimSpace([]byte(text)))
}
