package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
)

// callRun is how one `mcpcancel call` ended.
type callRun struct {
	code           int
	stdout, stderr string
}

// runCall runs `mcpcancel call args...` to its end.
func runCall(t *testing.T, args ...string) callRun {
	t.Helper()
	cmd := command(append([]string{"call"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // owned: this function waits for it
		defer close(done)
		cmd.Wait()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("mcpcancel call %s: did not end within 30s\nstderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	r := callRun{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mcpcancel call %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	})
	return r
}

// devStack is a running `mcpcancel dev --http 127.0.0.1:0`.
type devStack struct {
	p                *proc
	url, coordinator string
}

func startDevStack(t *testing.T) *devStack {
	t.Helper()
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0")
	coord := p.waitLine(t, "coordinator: ")
	return &devStack{p: p, coordinator: coord, url: p.waitLine(t, "mcp: ")}
}

// stop stops dev with SIGTERM; it must exit 0.
func (d *devStack) stop(t *testing.T) {
	t.Helper()
	d.p.signal(t, syscall.SIGTERM)
	if code := d.p.exitCode(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM, want 0", code)
	}
}

func (d *devStack) args(more ...string) []string {
	return append([]string{"--mcp", d.url, "--coordinator", d.coordinator}, more...)
}

// auditLineRE is the readable audit line of a call the client cancelled.
// Its handler is stopped beside the decision, so it may have returned
// before the decision was settled or after.
var auditLineRE = regexp.MustCompile(`^audit: cancelled by client \(reason "[^"]+"\) settled \d{4}-\d\d-\d\dT[0-9:.]+Z; handler (stopped [0-9.]+[µm]?s later|returned [0-9.]+[µm]?s before) on worker dev-worker; call [0-9a-f]{8}$`)

// TestCallCancel cancels a long sleep with --cancel-after, speaking
// 2026-07-28 (the default: the client closes the call's stream) and
// 2025-11-25 (a session: the client sends notifications/cancelled): call
// exits 4, prints "cancelled" and the audit record, which names the client
// as the initiator and the time the handler stopped. Then dev still stops
// cleanly.
func TestCallCancel(t *testing.T) {
	dev := startDevStack(t)
	for _, tc := range []struct {
		name, version, scope string
		json                 bool
	}{
		{"2026-07-28 by default", "", "stream:", false},
		{"2026-07-28 by default, as JSON", "", "stream:", true},
		{"2025-11-25", "2025-11-25", "session:", false},
		{"2025-11-25, as JSON", "2025-11-25", "session:", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := dev.args()
			if tc.version != "" {
				args = append(args, "--protocol-version", tc.version)
			}
			if tc.json {
				args = append(args, "--json")
			}
			r := runCall(t, append(args, "sleep", `{"seconds":30,"steps":300}`, "--cancel-after", "400ms")...)
			if r.code != 4 {
				t.Fatalf("exit %d, want 4 (cancelled)", r.code)
			}
			if !strings.Contains(r.stderr, "cancelled after 400ms (--cancel-after)") {
				t.Errorf("stderr does not say why the call was cancelled")
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if len(lines) != 2 || lines[0] != "cancelled" {
				t.Fatalf("stdout = %q, want \"cancelled\" and one audit line", r.stdout)
			}
			if !tc.json {
				if !auditLineRE.MatchString(lines[1]) {
					t.Fatalf("audit line %q does not match %s", lines[1], auditLineRE)
				}
				return
			}
			checkCancelledRecord(t, lines[1], tc.scope)
		})
	}
	dev.stop(t)
}

// checkCancelledRecord checks an audit JSON line: the sleep, cancelled by
// the client in a scope of the protocol's kind, its handler stopped.
func checkCancelledRecord(t *testing.T, line, scope string) {
	t.Helper()
	var a coordinator.AuditRecord
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		t.Fatalf("audit line %q: %v", line, err)
	}
	switch {
	case a.Tool != "sleep" || a.Outcome != "cancelled" || a.Initiator != "client":
		t.Fatalf("audit = %s %s by %s, want sleep cancelled by client", a.Tool, a.Outcome, a.Initiator)
	case !strings.HasPrefix(a.Scope, scope):
		t.Fatalf("scope = %s, want a %s scope", a.Scope, scope)
	case a.StoppedAt == nil || a.StoppedAt.Before(a.RequestedAt):
		t.Fatalf("stopped_at = %v, requested_at %v: want the handler's stop, after the call began", a.StoppedAt, a.RequestedAt)
	case a.Worker != "dev-worker" || len(a.RequestID) == 0:
		t.Fatalf("audit = %+v", a)
	}
}

// TestCallInterrupted: the first SIGINT cancels the call (it does not kill
// call), which prints "cancelled" and the audit record and exits 4.
func TestCallInterrupted(t *testing.T) {
	dev := startDevStack(t)
	cmd := command(append([]string{"call"}, dev.args("sleep", `{"seconds":30,"steps":300}`)...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout // read once the process exited
	p := startCmd(t, cmd)
	p.waitLine(t, "progress 2/300 ")
	p.signal(t, syscall.SIGINT)
	if code := p.exitCode(t); code != 4 {
		t.Fatalf("exit %d after SIGINT, want 4", code)
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "cancelled" || !auditLineRE.MatchString(lines[1]) {
		t.Fatalf("stdout = %q, want \"cancelled\" and the audit line", stdout.String())
	}
	dev.stop(t)
}

// startCmd starts a command made by the caller (who may have set its
// stdout), collecting its stderr; t's cleanup kills it if it still runs.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), more: make(chan struct{}, 1)}
	go p.collect(stderr) // owned by p: exited is closed when it ends
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("mcpcancel %s stderr:\n%s", cmd.Args[1], p.stderr())
		}
	})
	return p
}

// TestCallOutcomes runs calls that end each way, and their exit statuses.
func TestCallOutcomes(t *testing.T) {
	dev := startDevStack(t)
	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string // substrings
	}{
		{"echo", []string{"echo", `{"text":"hi"}`}, 0, "hi\n", ""},
		{"flags after the arguments", []string{"echo", `{"text":"hi"}`, "--protocol-version", "2025-11-25"}, 0, "hi\n", ""},
		{"-- ends the flags", []string{"--", "echo", `{"text":"--hi"}`}, 0, "--hi\n", ""},
		{"result as JSON", []string{"--json", "echo", `{"text":"hi"}`}, 0, `"content":[{"type":"text","text":"hi"}]`, ""},
		{"no arguments", []string{"sleep"}, 3, "seconds is required", "sleep returned an error result"},
		{"tool error", []string{"sleep", `{"seconds":-1}`}, 3, "seconds must be between 0 and 86400", "sleep returned an error result"},
		{"unknown tool", []string{"nope"}, 1, "", "unknown tool"},
		{"timeout", []string{"--timeout", "300ms", "sleep", `{"seconds":30,"steps":300}`}, 4, "cancelled\naudit: cancelled by client", "timed out after 300ms (--timeout)"},
		{"audit unreachable", []string{"--coordinator", "127.0.0.1:1", "--cancel-after", "400ms", "sleep", `{"seconds":30,"steps":300}`}, 1, "cancelled\n", "cannot read the audit: cannot reach the coordinator at 127.0.0.1:1"},
		{"cancelled before any progress, 2025-11-25", []string{"--protocol-version", "2025-11-25", "--cancel-after", "200ms", "sleep", `{"seconds":30}`}, 4, "cancelled\naudit: cancelled by client", ""},
		{"cancelled before any progress", []string{"--cancel-after", "200ms", "sleep", `{"seconds":30}`}, 4, "cancelled\n", ""},
		{"no audit wanted", []string{"--audit=false", "--cancel-after", "200ms", "sleep", `{"seconds":30}`}, 4, "cancelled\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCall(t, dev.args(tc.args...)...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d", r.code, tc.code)
			}
			if !strings.Contains(r.stdout, tc.stdout) || !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("want %q on stdout and %q on stderr", tc.stdout, tc.stderr)
			}
		})
	}
	if r := runCall(t, "--mcp", "http://127.0.0.1:1/mcp", "echo"); r.code != 1 || !strings.Contains(r.stderr, "no MCP gateway at http://127.0.0.1:1/mcp: is `mcpcancel dev` running?") {
		t.Errorf("no server: exit %d, want 1 and a message", r.code)
	}
	dev.stop(t)
}

// TestCallProgressLines: off a terminal, each notifications/progress is a
// line on stderr, in order, and the result follows on stdout.
func TestCallProgressLines(t *testing.T) {
	dev := startDevStack(t)
	r := runCall(t, dev.args("sleep", `{"seconds":0.3,"steps":3}`)...)
	if r.code != 0 || r.stdout != "slept 0.3s\n" {
		t.Fatalf("exit %d, stdout %q; want 0 and \"slept 0.3s\"", r.code, r.stdout)
	}
	var progress []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "progress ") {
			progress = append(progress, l)
		}
	}
	want := []string{"progress 1/3 slept step 1 of 3", "progress 2/3 slept step 2 of 3", "progress 3/3 slept step 3 of 3"}
	if strings.Join(progress, "\n") != strings.Join(want, "\n") {
		t.Fatalf("progress lines %q, want %q", progress, want)
	}
	dev.stop(t)
}

// TestCallOverStdio runs the server as `mcpcancel dev --stdio`: a call
// succeeds, and a cancelled one exits 4 without an audit lookup.
func TestCallOverStdio(t *testing.T) {
	stdio := []string{"--stdio-cmd", binary + " dev --stdio"}
	r := runCall(t, append(stdio, "echo", `{"text":"over stdio"}`)...)
	if r.code != 0 || r.stdout != "over stdio\n" {
		t.Fatalf("echo: exit %d, stdout %q", r.code, r.stdout)
	}
	r = runCall(t, append(stdio, "--cancel-after", "500ms", "sleep", `{"seconds":30,"steps":300}`)...)
	if r.code != 4 || r.stdout != "cancelled\n" || !strings.Contains(r.stderr, "no audit lookup over stdio") {
		t.Fatalf("cancelled sleep: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestCallUsage checks, in process, command lines that cannot run (exit 2)
// and the help.
func TestCallUsage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"no tool", []string{"call"}, 2, "", "name the TOOL to call"},
		{"bad JSON", []string{"call", "echo", "{"}, 2, "", "JSON-ARGS must be a JSON object"},
		{"not an object", []string{"call", "echo", "[1]"}, 2, "", "JSON-ARGS must be a JSON object"},
		{"null", []string{"call", "echo", "null"}, 2, "", "JSON-ARGS must be a JSON object"},
		{"extra argument", []string{"call", "echo", "{}", "more"}, 2, "", `unexpected argument "more"`},
		{"negative duration", []string{"call", "--timeout", "-1s", "echo"}, 2, "", "must not be negative"},
		{"bad flag", []string{"call", "echo", "--cancel-after", "soon"}, 2, "", `invalid value "soon" for flag -cancel-after`},
		{"help", []string{"help", "call"}, 0, "mcpcancel call [flags] TOOL [JSON-ARGS]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Main(t.Context(), tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stdout %q, stderr %q; want %q and %q", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}
	var help bytes.Buffer
	Main(t.Context(), []string{"call", "--help"}, &help, &help)
	for _, want := range []string{"Exit status:", "3    the tool returned an error result", "4    cancelled", "130  a second signal",
		"--cancel-after duration", "env MCPCANCEL_CANCEL_AFTER", "--stdio-cmd command", "--protocol-version version"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("call --help lacks %q", want)
		}
	}
}
