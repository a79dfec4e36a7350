package main

import (
	"bytes"
	"strings"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// run runs the binary to its end and returns its exit status, stdout and
// stderr.
func runExit(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestToolsAndOperatorCancel lists the demo tools with their arguments,
// then runs `mcpcancel call sleep` (the Go SDK client) and cancels it with
// `mcpcancel cancel` by its short id: the client is answered with an
// error naming the operator, the audit names the operator, a second
// cancel says the call had ended, and an id that matches nothing says so.
func TestToolsAndOperatorCancel(t *testing.T) {
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	coord := p.waitLine(t, "coordinator: ")
	mcpURL := p.waitLine(t, "mcp: ")

	code, out, errOut := runExit(t, "tools", "--coordinator", coord)
	if code != 0 {
		t.Fatalf("tools: exit %d\n%s", code, errOut)
	}
	inOrder(t, "tools", out, []string{"TOOL", "ARGUMENTS", "echo", "text:string*", "sleep", "seconds:number*", "steps:integer=10", "spin", "millis:integer*"})

	callCmd := command("call", "--mcp", mcpURL, "--coordinator", coord, "sleep", `{"seconds":120,"steps":1200}`)
	var callOut bytes.Buffer
	callCmd.Stdout = &callOut
	call := startCmd(t, callCmd)
	call.waitLine(t, "progress ")
	admin := pb.NewAdminServiceClient(dialTest(t, coord))
	running, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{})
	if err != nil || len(running.Calls) != 1 {
		t.Fatalf("ListCalls: %v, %v; want the sleep", running, err)
	}
	id := running.Calls[0].GetCall().GetCallId()

	code, out, errOut = runExit(t, "cancel", "--coordinator", coord, "--as", "tester", "--reason", "runaway", id[:8])
	want := "cancelled by operator tester (unverified: no client certificate): runaway"
	if code != 0 || out != "cancelled "+id+": "+want+"\n" {
		t.Fatalf("cancel: exit %d, stdout %q, stderr %q; want it to say %q", code, out, errOut, want)
	}
	if got := call.exitCode(t); got != 3 || !strings.Contains(callOut.String(), "an operator cancelled the call") {
		t.Errorf("mcpcancel call exited %d (want 3, a tool error), stdout %q", got, callOut.String())
	}
	recs, err := pb.NewCoordinatorServiceClient(dialTest(t, coord)).ListAudit(t.Context(), &pb.ListAuditRequest{CallId: id})
	if err != nil || len(recs.Records) != 1 || recs.Records[0].GetInitiator() != pb.Initiator_INITIATOR_OPERATOR || recs.Records[0].GetReason() != want {
		t.Errorf("audit of the call: %v, %v; want one record by the operator, reason %q", recs, err, want)
	}

	for _, tc := range []struct {
		name, id, want string
	}{
		{"again", id[:8], "no running call's id starts with " + id[:8]},
		{"the full id again", id, "had already ended: it was cancelled (operator: " + want + ")"},
		{"not hex", "zzz", "want one CALL: a call id, or its start, in hex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runExit(t, "cancel", "--coordinator", coord, tc.id)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("cancel %s: exit %d, stderr %q; want it to say %q", tc.id, code, errOut, tc.want)
			}
		})
	}
}
