package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// TestCallsListsAndWatches: `mcpcancel calls` lists a sleep in flight
// (principal, tool, worker, age); `calls --watch --json` prints it as
// running, then an echo that starts and completes, then the sleep as
// cancelled; SIGINT ends the watch with status 0.
func TestCallsListsAndWatches(t *testing.T) {
	d := startDevStack(t)
	defer d.stop(t)
	cs := mcpSession(t, d.url, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	slept := make(chan error, 1)
	go func() { // waited for below
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 600}})
		slept <- err
	}()
	client := pb.NewCoordinatorServiceClient(dialTest(t, d.coordinator))
	poll(t, "the sleep to run", func() bool {
		resp, err := client.ListWorkers(t.Context(), &pb.ListWorkersRequest{})
		return err == nil && len(resp.Workers) == 1 && resp.Workers[0].InFlight == 1
	})

	out, err := runBinary(t, "calls", "--coordinator", d.coordinator)
	if err != nil {
		t.Fatalf("calls: %v\n%s", err, stderrOf(err))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "CALL PRINCIPAL TOOL WORKER AGE" {
		t.Fatalf("calls printed:\n%s\nwant a header and one call", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 5 || len(f[0]) != 8 || f[1] != "anonymous" || f[2] != "sleep" || f[3] != "dev-worker" || !strings.HasSuffix(f[4], "s") {
		t.Fatalf("calls row %q, want the sleep by anonymous on dev-worker with its age", lines[1])
	}

	watch := startStdout(t, "calls", "--coordinator", d.coordinator, "--watch", "--json")
	type event struct {
		Event, CallID, Tool string
	}
	next := func() event {
		var e struct {
			Event  string `json:"event"`
			CallID string `json:"call_id"`
			Tool   string `json:"tool"`
		}
		if line := watch.next(t); json.Unmarshal([]byte(line), &e) != nil {
			t.Fatalf("watch line %q is not a JSON object", line)
		}
		return event{e.Event, e.CallID, e.Tool}
	}
	sleep := next()
	if sleep.Event != "running" || sleep.Tool != "sleep" || !strings.HasPrefix(sleep.CallID, strings.Fields(lines[1])[0]) {
		t.Fatalf("first watch event %+v, want the sleep running", sleep)
	}
	callEcho(t, cs, 1)
	if e := next(); e.Event != "started" || e.Tool != "echo" {
		t.Fatalf("watch event %+v, want the echo started", e)
	}
	if e := next(); e.Event != "completed" || e.Tool != "echo" {
		t.Fatalf("watch event %+v, want the echo completed", e)
	}
	cancel()
	<-slept
	if e := next(); e != (event{"cancelled", sleep.CallID, "sleep"}) {
		t.Fatalf("watch event %+v, want the sleep cancelled", e)
	}
	watch.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-watch.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("calls --watch did not exit within 10s of SIGINT")
	}
	if code := watch.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("calls --watch exited %d after SIGINT, want 0; stderr:\n%s", code, watch.stderr.String())
	}
}
