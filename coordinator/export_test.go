package coordinator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// auditKeys are the fields of an exported audit record (docs/design.md §7).
var auditKeys = []string{
	"call_id", "scope", "principal", "request_id", "method", "tool", "worker", "gateway",
	"outcome", "initiator", "reason", "requested_at", "settled_at", "stopped_at",
}

// The exporter writes each audit record settled since it was made once,
// as a JSON line; the later stopped_at update of a record is not a new
// line, and records settled before are not exported.
func TestExportWritesEachRecordOnce(t *testing.T) {
	e := newEnv(t, envOptions{})
	completedEcho(t, e, key("conn:x", num(0)))
	lines := exportLines(t, e.coords[0].Server)

	done := completedEcho(t, e, key("conn:x", num(1)))
	k := key("conn:x", num(2))
	b := e.begin(t, e.c, k, "hold")
	s := e.execute(t, b, "hold", `{}`)
	e.hold.next(t)
	if got := e.cancel(t, e.c, k, "stop"); got != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v, want CANCELLED", got)
	}
	if ev := s.final(t); ev.GetCancelled() == nil {
		t.Fatalf("final = %v, want cancelled", ev)
	}
	waitFor(t, "stopped_at", func() bool {
		as := e.audits(t, b.CallId)
		return len(as) == 1 && as[0].StoppedAt != nil
	})
	last := completedEcho(t, e, key("conn:x", num(3))) // whatever came before it is in

	want := []struct{ call, outcome string }{{done, "completed"}, {b.CallId, "cancelled"}, {last, "completed"}}
	for i, w := range want {
		a := nextRecord(t, lines)
		if a.CallID != w.call || a.Outcome != w.outcome {
			t.Fatalf("line %d = %s %s, want %s %s", i+1, a.CallID, a.Outcome, w.call, w.outcome)
		}
	}
}

// The exporter rides out the loss of the etcd leader: it neither loses nor
// repeats a record.
func TestExportSurvivesLeaderLoss(t *testing.T) {
	cl := etcdtest.Start(t, 3, etcdtest.Options{})
	e := newEnv(t, envOptions{etcd: cl})
	lines := exportLines(t, e.coords[0].Server)

	first := completedEcho(t, e, key("conn:x", num(1)))
	if a := nextRecord(t, lines); a.CallID != first {
		t.Fatalf("line 1 is call %s, want %s", a.CallID, first)
	}
	leader := cl.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	cl.Members[leader].Close()
	calls := []string{completedEcho(t, e, key("conn:x", num(2))), completedEcho(t, e, key("conn:x", num(3)))}
	for i, id := range calls {
		if a := nextRecord(t, lines); a.CallID != id || a.Outcome != "completed" {
			t.Fatalf("line %d = %s %s, want %s completed", i+2, a.CallID, a.Outcome, id)
		}
	}
}

// completedEcho runs one echo call to completion and returns its call id.
func completedEcho(t *testing.T, e *env, k *pb.CallKey) string {
	t.Helper()
	b := e.begin(t, e.c, k, "echo")
	if ev := e.execute(t, b, "echo", `{"text":"hi"}`).final(t); ev.GetResult() == nil {
		t.Fatalf("echo final = %v, want a result", ev)
	}
	return b.CallId
}

// exportLines runs an Exporter of srv into a pipe and returns the lines it
// writes: every record settled from now on. t's cleanup stops it and checks that it
// returned nil.
func exportLines(t *testing.T, srv *coordinator.Server) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	x := coordinator.NewExporter(srv, pw)
	ran := make(chan error, 1)
	go func() { // owned by the cleanup, which waits for ran
		err := x.Run(ctx)
		pw.Close()
		ran <- err
	}()
	lines := make(chan string, 16)
	scanned := make(chan struct{})
	go func() { // owned by the cleanup, which waits for scanned
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done(): // nobody reads any more; drain the pipe
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("exporter: %v", err)
		}
		<-scanned
	})
	return lines
}

// nextRecord reads the next exported line, checks that it is a JSON object
// with exactly the audit's fields, and decodes it.
func nextRecord(t *testing.T, lines <-chan string) *coordinator.AuditRecord {
	t.Helper()
	var line string
	select {
	case line = <-lines:
	case <-time.After(20 * time.Second):
		t.Fatal("no exported line within 20s")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		t.Fatalf("exported line %q: %v", line, err)
	}
	var got []string
	for k := range fields {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, slices.Sorted(slices.Values(auditKeys))) {
		t.Fatalf("exported fields %v, want %v", got, auditKeys)
	}
	var a coordinator.AuditRecord
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		t.Fatal(err)
	}
	return &a
}
