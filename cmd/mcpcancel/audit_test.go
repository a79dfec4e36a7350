package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/clientcmd"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// auditFields are the fields of an audit record as JSON (docs/design.md §7).
var auditFields = []string{
	"call_id", "scope", "principal", "request_id", "method", "tool", "worker", "gateway",
	"outcome", "initiator", "reason", "requested_at", "settled_at", "stopped_at",
}

// auditLine is the part of a JSON audit line the tests look at.
type auditLine struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Outcome   string `json:"outcome"`
	Initiator string `json:"initiator"`
}

// TestAuditCommandLines runs, in process, audit command lines that end
// before they reach a coordinator, or find none.
func TestAuditCommandLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		env    []string
		code   int
		stdout []string
		stderr []string
	}{
		{"no subcommand", []string{"audit"}, nil, 2, nil, []string{clientcmd.ErrNoAuditVerb.Error(), "mcpcancel help audit"}},
		{"unknown subcommand", []string{"audit", "show"}, nil, 2, nil, []string{`unknown audit subcommand "show"`}},
		{"help", []string{"help", "audit"}, nil, 0, []string{"Usage: mcpcancel audit list|tail", "mcpcancel audit list --help"}, nil},
		{"list --help", []string{"audit", "list", "--help"}, nil, 0, []string{
			"Usage: mcpcancel audit list [flags]",
			"--call id", "env MCPCANCEL_CALL",
			"--coordinator address", "default 127.0.0.1:7801; env MCPCANCEL_COORDINATOR",
			"--initiator initiator", "env MCPCANCEL_INITIATOR",
			"--json", "env MCPCANCEL_JSON",
			"--limit N", "the newest N records (0: all)", "default 100; env MCPCANCEL_LIMIT",
			"--method method", "env MCPCANCEL_METHOD",
			"--outcome outcome", "completed, tool_error, cancelled, failed, cancel_lost", "env MCPCANCEL_OUTCOME",
			"--principal principal", "env MCPCANCEL_PRINCIPAL",
			"--since duration", "env MCPCANCEL_SINCE",
			"--tool name", "env MCPCANCEL_TOOL",
		}, nil},
		{"tail has no --limit", []string{"audit", "tail", "--limit", "3"}, nil, 2, nil, []string{"flag provided but not defined: -limit"}},
		{"bad outcome", []string{"audit", "list", "--outcome", "won"}, nil, 2, nil, []string{`--outcome "won": want one of completed, tool_error, cancelled, failed, cancel_lost`}},
		{"bad outcome from env", []string{"audit", "tail"}, []string{"MCPCANCEL_OUTCOME=lost"}, 2, nil, []string{`--outcome "lost"`}},
		{"bad limit", []string{"audit", "list", "--limit", "-1"}, nil, 2, nil, []string{"--limit must not be negative, not -1 (0 lists all)"}},
		{"bad initiator", []string{"audit", "list", "--initiator", "me"}, nil, 2, nil, []string{`--initiator "me": want one of client, timeout`}},
		{"call not hex", []string{"audit", "list", "--call", "nothing"}, nil, 2, nil, []string{`--call "nothing": want a call id or its start`}},
		{"negative since", []string{"audit", "list", "--since", "-1m"}, nil, 2, nil, []string{"--since must not be negative"}},
		{"stray argument", []string{"audit", "list", "now"}, nil, 2, nil, []string{`unexpected argument "now"`}},
		{"no coordinator", []string{"audit", "list", "--coordinator", "127.0.0.1:1"}, nil, 1, nil, []string{
			"mcpcancel audit: cannot reach the coordinator at 127.0.0.1:1", "is `mcpcancel dev` running? --coordinator names another address",
		}},
		{"export to nowhere", []string{"coordinator", "--audit-export", filepath.Join(t.TempDir(), "no", "such", "dir")}, nil, 1, nil, []string{
			"mcpcancel coordinator: --audit-export: open ",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			if code := Main(t.Context(), tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			inOrder(t, "stdout", stdout.String(), tc.stdout)
			inOrder(t, "stderr", stderr.String(), tc.stderr)
			if tc.stdout == nil && stdout.Len() > 0 {
				t.Errorf("unexpected stdout:\n%s", stdout.String())
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			}
		})
	}
}

// TestAuditListAndTail makes calls through `mcpcancel dev` (three echoes
// that complete, a sleep the client cancels), lists their audit records
// with `mcpcancel audit list`, as JSON lines and as a table, with and
// without filters, and follows a new one with `mcpcancel audit tail`.
func TestAuditListAndTail(t *testing.T) {
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0")
	coord := p.waitLine(t, "coordinator: ")
	url := p.waitLine(t, "mcp: ")
	echo := mcpSession(t, url, nil)
	for i := range 3 {
		callEcho(t, echo, i)
	}
	cancelSleep(t, url)
	client := pb.NewCoordinatorServiceClient(dialTest(t, coord))
	poll(t, "four audit records", func() bool {
		resp, err := client.ListAudit(t.Context(), &pb.ListAuditRequest{})
		return err == nil && len(resp.Records) == 4
	})

	all := auditList(t, coord)
	if got := outcomeCounts(all); got["echo completed"] != 3 || got["sleep cancelled"] != 1 || len(got) != 2 {
		t.Fatalf("audit list: %v, want 3 echo completed and 1 sleep cancelled", got)
	}
	cancelled := all[slices.IndexFunc(all, func(a auditLine) bool { return a.Outcome == "cancelled" })]
	if cancelled.Initiator != "client" {
		t.Errorf("cancelled by %q, want client", cancelled.Initiator)
	}
	for _, tc := range []struct {
		name string
		args []string
		want func(auditLine) bool
		n    int
	}{
		{"cancelled", []string{"--outcome", "cancelled"}, func(a auditLine) bool { return a == cancelled }, 1},
		{"echo", []string{"--tool", "echo"}, func(a auditLine) bool { return a.Tool == "echo" && a.Outcome == "completed" }, 3},
		{"one call", []string{"--call", cancelled.CallID}, func(a auditLine) bool { return a == cancelled }, 1},
		{"its short id", []string{"--call", cancelled.CallID[:8]}, func(a auditLine) bool { return a == cancelled }, 1},
		{"by the client", []string{"--initiator", "client"}, func(a auditLine) bool { return a == cancelled }, 1},
		{"by an operator", []string{"--initiator", "operator"}, nil, 0},
		{"anonymous", []string{"--principal", "anonymous", "--method", "tools/call"}, func(auditLine) bool { return true }, 4},
		{"someone else", []string{"--principal", "mallory"}, nil, 0},
		{"no such method", []string{"--method", "prompts/get"}, nil, 0},
		{"echo, cancelled", []string{"--tool", "echo", "--outcome", "cancelled"}, nil, 0},
		{"recent", []string{"--since", "1h"}, func(auditLine) bool { return true }, 4},
		{"the future", []string{"--since", "1ns", "--call", "ffff"}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := auditList(t, coord, tc.args...)
			if len(got) != tc.n || slices.ContainsFunc(got, func(a auditLine) bool { return !tc.want(a) }) {
				t.Fatalf("audit list %s = %+v, want %d matching records", strings.Join(tc.args, " "), got, tc.n)
			}
		})
	}
	if got := auditList(t, coord, "--limit", "2"); !slices.Equal(got, all[2:]) {
		t.Errorf("audit list --limit 2 = %+v, want the newest two of %+v", got, all)
	}
	checkTable(t, coord, all)
	tailEcho(t, coord, echo, all)
}

// mcpSession connects an MCP client to url.
func mcpSession(t *testing.T, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "audit-test", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callEcho(t *testing.T, cs *mcp.ClientSession, i int) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError {
		t.Fatalf("echo %d = %v, %v", i, res, err)
	}
}

// cancelSleep starts a long sleep and cancels it after its first progress
// notification.
func cancelSleep(t *testing.T, url string) {
	t.Helper()
	progressed := make(chan struct{}, 1)
	cs := mcpSession(t, url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 30, "steps": 300}}
	params.SetProgressToken("p")
	errc := make(chan error, 1)
	go func() { _, err := cs.CallTool(ctx, params); errc <- err }() // waited for below
	select {
	case <-progressed:
	case err := <-errc:
		t.Fatalf("sleep ended before any progress: %v", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("sleep = %v, want cancelled", err)
	}
}

// auditList runs `mcpcancel audit list --json` and checks that each line
// is a JSON object with exactly the audit's fields.
func auditList(t *testing.T, coord string, args ...string) []auditLine {
	t.Helper()
	out, err := command(append([]string{"audit", "list", "--coordinator", coord, "--json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("audit list %s: %v\n%s", strings.Join(args, " "), err, stderrOf(err))
	}
	var got []auditLine
	for line := range strings.Lines(string(out)) {
		got = append(got, parseAuditLine(t, line))
	}
	return got
}

func parseAuditLine(t *testing.T, line string) auditLine {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	var keys []string
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := slices.Sorted(slices.Values(auditFields)); !slices.Equal(keys, want) {
		t.Fatalf("line has fields %v, want %v", keys, want)
	}
	var a auditLine
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func stderrOf(err error) []byte {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.Stderr
	}
	return nil
}

func outcomeCounts(as []auditLine) map[string]int {
	n := map[string]int{}
	for _, a := range as {
		n[a.Tool+" "+a.Outcome]++
	}
	return n
}

// checkTable runs `mcpcancel audit list` without --json and checks the
// table against the records listed as JSON.
func checkTable(t *testing.T, coord string, all []auditLine) {
	t.Helper()
	out, err := command("audit", "list", "--coordinator", coord).Output()
	if err != nil {
		t.Fatalf("audit list: %v\n%s", err, stderrOf(err))
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"SETTLED", "OUTCOME", "INITIATOR", "TOOL", "REQUEST", "CALL", "STOP", "REASON"}) {
		t.Fatalf("header %q", lines[0])
	}
	if len(lines) != len(all)+1 {
		t.Fatalf("table has %d rows, want %d:\n%s", len(lines)-1, len(all), out)
	}
	for i, line := range lines[1:] {
		f := strings.Fields(line) // SETTLED is a date and a time; REQUEST is scope/id
		a := all[i]
		if len(f) < 9 || f[2] != a.Outcome || f[4] != a.Tool || f[6] != a.CallID[:8] || !strings.Contains(f[5], "/") {
			t.Errorf("row %d %q does not show %+v", i+1, line, a)
		}
		if _, err := time.ParseInLocation("2006-01-02 15:04:05.000", f[0]+" "+f[1], time.Local); err != nil {
			t.Errorf("row %d settled %q: %v", i+1, f[0]+" "+f[1], err)
		}
		if f[7] != "-" {
			if _, err := time.ParseDuration(f[7]); err != nil {
				t.Errorf("row %d stop %q: %v", i+1, f[7], err)
			}
		}
	}
}

// tailEcho runs `mcpcancel audit tail --json --tool echo --since 1h`: it
// replays the echo records in all, then shows a new echo call's, until
// SIGINT ends it with status 0.
func tailEcho(t *testing.T, coord string, cs *mcp.ClientSession, all []auditLine) {
	t.Helper()
	tail := startStdout(t, "audit", "tail", "--coordinator", coord, "--json", "--tool", "echo", "--since", "1h")
	var replayed []auditLine
	for _, a := range all {
		if a.Tool == "echo" {
			replayed = append(replayed, a)
		}
	}
	for i, want := range replayed { // once replayed, the watch is on
		if got := parseAuditLine(t, tail.next(t)); got != want {
			t.Fatalf("tail line %d = %+v, want %+v", i+1, got, want)
		}
	}
	callEcho(t, cs, 3)
	got := parseAuditLine(t, tail.next(t))
	if got.Tool != "echo" || got.Outcome != "completed" || slices.ContainsFunc(all, func(a auditLine) bool { return a.CallID == got.CallID }) {
		t.Fatalf("tail line %+v, want the new echo call completed", got)
	}
	if err := tail.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tail.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not exit within 10s of SIGINT")
	}
	if code := tail.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("tail exited %d after SIGINT, want 0; stderr:\n%s", code, tail.stderr.String())
	}
}

// stdoutProc is a running mcpcancel whose stdout is read line by line.
type stdoutProc struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan struct{} // closed once stdout was read and the process waited for
	stderr bytes.Buffer  // read once exited is closed
}

func startStdout(t *testing.T, args ...string) *stdoutProc {
	t.Helper()
	p := &stdoutProc{cmd: command(args...), lines: make(chan string, 64), exited: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go func() { // owned by p: exited is closed when it ends
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-stop: // nobody reads any more
			}
		}
		p.cmd.Wait()
	}()
	t.Cleanup(func() {
		close(stop)
		p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// next waits for the next line of stdout.
func (p *stdoutProc) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-p.exited:
		t.Fatalf("exited (%v) early; stderr:\n%s", p.cmd.ProcessState, p.stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("no line within 20s")
	}
	return ""
}

// TestCoordinatorAuditExport runs `mcpcancel coordinator --audit-export
// FILE` and a demo worker, makes one call, and finds its record appended
// to FILE as a JSON line.
func TestCoordinatorAuditExport(t *testing.T) {
	etcd := etcdtest.Single(t)
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	coord := start(t, nil, "coordinator", "--listen", "127.0.0.1:0", "--etcd", strings.Join(etcd.Endpoints(), ","), "--audit-export", file)
	addr := coord.waitLine(t, "coordinator: ")
	wk := start(t, nil, "worker", "--coordinator", addr, "--demo")
	wk.waitLine(t, "worker: ")
	conn := dialTest(t, addr)
	waitServing(t, conn)
	client := pb.NewCoordinatorServiceClient(conn)
	waitForTools(t, client, "echo")

	b := beginCall(t, client, "echo", 1)
	if events := execute(t, b, "echo", `{"text":"hi"}`); len(events) != 1 || events[0].GetResult() == nil {
		t.Fatalf("echo = %v, want a result", events)
	}
	poll(t, "the exported record", func() bool {
		data, err := os.ReadFile(file)
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	coord.signal(t, syscall.SIGTERM)
	if code := coord.exitCode(t); code != 0 {
		t.Fatalf("coordinator exited %d after SIGTERM, want 0", code)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := slices.Collect(strings.Lines(string(data)))
	if len(lines) != 1 {
		t.Fatalf("exported %d lines, want 1:\n%s", len(lines), data)
	}
	if a := parseAuditLine(t, lines[0]); a.CallID != b.GetCallId() || a.Outcome != "completed" || a.Tool != "echo" {
		t.Fatalf("exported %+v, want call %s completed", a, b.GetCallId())
	}
}

// TestAuditListShowsTheNewest makes 120 calls and lists the audit with the
// default limit: the newest 100 come out, the last one made among them,
// and stderr says that the 20 oldest were left out.
func TestAuditListShowsTheNewest(t *testing.T) {
	p := start(t, nil, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0")
	coord := p.waitLine(t, "coordinator: ")
	cs := mcpSession(t, p.waitLine(t, "mcp: "), nil)
	for i := range 120 {
		callEcho(t, cs, i)
	}
	client := pb.NewCoordinatorServiceClient(dialTest(t, coord))
	var newest string
	poll(t, "120 audit records", func() bool {
		var n int
		req := &pb.ListAuditRequest{PageSize: 1000}
		resp, err := client.ListAudit(t.Context(), req)
		if err != nil {
			return false
		}
		n = len(resp.Records)
		if n > 0 {
			newest = resp.Records[n-1].GetCallId()
		}
		return n == 120
	})
	cmd := command("audit", "list", "--coordinator", coord, "--json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("audit list: %v\n%s", err, stderr.String())
	}
	var got []auditLine
	for line := range strings.Lines(string(out)) {
		got = append(got, parseAuditLine(t, line))
	}
	if len(got) != 100 || got[len(got)-1].CallID != newest {
		t.Fatalf("audit list printed %d records ending with %v, want 100 ending with the newest, %s", len(got), got[len(got)-1], newest)
	}
	if want := "20 older matching records left out: these are the newest 100 of 120"; !strings.Contains(stderr.String(), want) {
		t.Errorf("audit list stderr %q, want it to say %q", stderr.String(), want)
	}
	all := command("audit", "list", "--coordinator", coord, "--json", "--limit", "0")
	if out, err := all.Output(); err != nil || strings.Count(string(out), "\n") != 120 {
		t.Errorf("audit list --limit 0: %d lines, %v; want all 120", strings.Count(string(out), "\n"), err)
	}
}
