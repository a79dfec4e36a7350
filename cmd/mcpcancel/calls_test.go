package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// TestCallsListsAndWatches: `mcpcancel calls` lists a sleep in flight
// (principal, tool, worker, age, no progress yet); `calls --watch --json`
// prints it as
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
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "CALL PRINCIPAL TOOL WORKER AGE LAST PROGRESS" {
		t.Fatalf("calls printed:\n%s\nwant a header and one call", out)
	}
	// The sleep's first step is a minute away: no progress yet.
	if f := strings.Fields(lines[1]); len(f) != 6 || len(f[0]) != 8 || f[1] != "anonymous" || f[2] != "sleep" || f[3] != "dev-worker" || !strings.HasSuffix(f[4], "s") || f[5] != "-" {
		t.Fatalf("calls row %q, want the sleep by anonymous on dev-worker with its age and no progress", lines[1])
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
		if e.Event == "progress" {
			t.Fatalf("watch event %+v: no call here reports progress", e)
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

// TestCallsShowsLastProgress: a sleep that reports a step every second
// shows its last progress in `mcpcancel calls` once its worker's
// heartbeat carried it, and `calls --watch --json` prints a progress line
// as it moves on.
func TestCallsShowsLastProgress(t *testing.T) {
	d := startDevStack(t)
	defer d.stop(t)
	cs := mcpSession(t, d.url, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	slept := make(chan error, 1)
	go func() { // waited for below
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 600, "steps": 600}})
		slept <- err
	}()
	defer func() { cancel(); <-slept }()
	admin := pb.NewAdminServiceClient(dialTest(t, d.coordinator))
	poll(t, "the sleep's progress to be listed", func() bool {
		resp, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{})
		return err == nil && len(resp.Calls) == 1 && resp.Calls[0].GetLastProgress() != nil
	})

	out, err := runBinary(t, "calls", "--coordinator", d.coordinator)
	if err != nil {
		t.Fatalf("calls: %v\n%s", err, stderrOf(err))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	cell := regexp.MustCompile(`  ([0-9]+)/600 "slept step ([0-9]+) of 600" [0-9.]+m?s ago$`)
	if m := cell.FindStringSubmatch(lines[len(lines)-1]); len(lines) != 2 || m == nil || m[1] != m[2] {
		t.Fatalf("calls printed:\n%s\nwant the sleep with its last step as LAST PROGRESS, e.g. 3/600 \"slept step 3 of 600\" 1s ago", out)
	}

	watch := startStdout(t, "calls", "--coordinator", d.coordinator, "--watch", "--json")
	type event struct {
		Event    string   `json:"event"`
		Tool     string   `json:"tool"`
		Progress *float64 `json:"progress"`
		Total    float64  `json:"total"`
	}
	var first float64
	for {
		var e event
		if line := watch.next(t); json.Unmarshal([]byte(line), &e) != nil {
			t.Fatalf("watch line %q is not a JSON object", line)
		}
		if e.Tool != "sleep" || e.Progress == nil || e.Total != 600 {
			t.Fatalf("watch event %+v, want the sleep with progress of 600", e)
		}
		if e.Event == "running" {
			first = *e.Progress
			continue
		}
		if e.Event != "progress" || *e.Progress <= first {
			t.Fatalf("watch event %+v after progress %v, want a progress line further on", e, first)
		}
		break
	}
	watch.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-watch.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("calls --watch did not exit within 10s of SIGINT")
	}
}
