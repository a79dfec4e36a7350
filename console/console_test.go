package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/console"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks(
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)...)
}

// system is a coordinator serving both services, a demo worker, a
// gateway, and the console in front of the coordinator.
type system struct {
	mcp     *mcp.ClientSession
	console string // base URL
}

func newSystem(t *testing.T, access func(*http.Request) (console.Viewer, error)) *system {
	t.Helper()
	etcd := etcdtest.Single(t)
	co := testcluster.StartCoordinator(t, etcd.Client(), coordinator.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := testcluster.GRPCServer()
	pb.RegisterAdminServiceServer(gs, coordinator.NewAdmin(co.Server))
	pb.RegisterCoordinatorServiceServer(gs, co.Server)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	conn := testcluster.Conn(t, lis.Addr().String())
	testcluster.StartWorker(t, worker.Options{Coordinator: co.Addr, Name: "w1"}, demo.Register)
	_, mcpURL := testcluster.StartGateway(t, co.Conn(t), gateway.Options{Name: "g1"})
	client := mcp.NewClient(&mcp.Implementation{Name: "console-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: mcpURL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	c := console.New(console.Options{Coordinator: pb.NewCoordinatorServiceClient(conn), Admin: pb.NewAdminServiceClient(conn), Access: access})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return &system{mcp: cs, console: srv.URL}
}

func (s *system) echo(t *testing.T, text string) {
	t.Helper()
	res, err := s.mcp.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %v, %v", res, err)
	}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestAuditSearchAndTimeline searches the audit by each filter and opens
// a call's timeline, which says what it does not know.
func TestAuditSearchAndTimeline(t *testing.T) {
	s := newSystem(t, nil)
	for _, text := range []string{"a", "b", "c"} {
		s.echo(t, text)
	}
	testcluster.WaitFor(t, "three decisions on the calls page", func() bool {
		_, body := get(t, s.console+"/")
		return strings.Count(body, `data-outcome="completed"`) == 3
	})
	_, page := get(t, s.console+"/audit?tool=echo")
	i := strings.Index(page, `data-decision="`)
	if i < 0 {
		t.Fatalf("no decision rows in the audit page:\n%s", page)
	}
	id := page[i+len(`data-decision="`) : i+len(`data-decision="`)+32]
	for _, tc := range []struct {
		query string
		rows  int
		say   string
	}{
		{"tool=echo", 3, "3 matching records"},
		{"call=" + id[:6], 1, "1 matching records"},
		{"method=tools/call&principal=anonymous&outcome=completed&since=1h", 3, "3 matching records"},
		{"initiator=operator", 0, "0 matching records"},
		{"method=prompts/get", 0, "0 matching records"},
		{"since=yesterday", 0, "since is a duration"},
		{"call=xyz", 0, "call is a call id or its start"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			code, body := get(t, s.console+"/audit?"+strings.ReplaceAll(tc.query, "/", url.QueryEscape("/")))
			if code != http.StatusOK || strings.Count(body, `data-decision="`) != tc.rows || !strings.Contains(body, tc.say) {
				t.Errorf("audit?%s: %d, %d rows; want %d rows and %q", tc.query, code, strings.Count(body, `data-decision="`), tc.rows, tc.say)
			}
		})
	}
	code, body := get(t, s.console+"/calls/"+id)
	for _, want := range []string{"requested", "placed", "on worker w1", "decided", "completed", "handler stopped", "trace id", "not recorded",
		`id="timeline-picture"`, `data-step="requested"`, `data-step="decided"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("timeline of %s: %d, missing %q", id, code, want)
		}
	}
	if code, _ := get(t, s.console+"/calls/"+strings.Repeat("0", 32)); code != http.StatusNotFound {
		t.Errorf("timeline of an unknown call: %d, want 404", code)
	}
	// The short id the pages and the CLI show leads to the same page.
	if code, short := get(t, s.console+"/calls/"+id[:8]); code != http.StatusOK || !strings.Contains(short, `data-step="decided"`) || !strings.Contains(short, id) {
		t.Errorf("timeline by short id %s: %d", id[:8], code)
	}
	if code, _ := get(t, s.console+"/calls/00000000"); code != http.StatusNotFound {
		t.Errorf("timeline of an unknown short id: %d, want 404", code)
	}
	if code, body := get(t, s.console+"/workers"); code != http.StatusOK || !strings.Contains(body, "w1") || !strings.Contains(body, "sleep") {
		t.Errorf("workers page: %d\n%s", code, body)
	}
}

// TestReadOnlyViewer: a viewer without the operator role sees no cancel
// button and cannot cancel; with certificate access and no certificate,
// nothing is shown at all.
func TestReadOnlyViewer(t *testing.T) {
	s := newSystem(t, func(*http.Request) (console.Viewer, error) { return console.Viewer{Name: "auditor"}, nil })
	code, body := get(t, s.console+"/")
	if code != http.StatusOK || strings.Contains(body, "data-cancel") || !strings.Contains(body, "auditor (read only)") {
		t.Errorf("read-only calls page: %d\n%s", code, body)
	}
	resp, err := http.PostForm(s.console+"/calls/"+strings.Repeat("0", 32)+"/cancel", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a read-only cancel: %d, want 403", resp.StatusCode)
	}

	certs := newSystem(t, console.CertAccess)
	if code, body := get(t, certs.console+"/"); code != http.StatusForbidden || !strings.Contains(body, "client certificate") {
		t.Errorf("no certificate: %d %q, want 403 asking for a client certificate", code, body)
	}
}

// TestEventsSendStats: the calls page's event stream carries the charts'
// data at once: the decisions so far, by outcome and initiator, and the
// workers' running handlers.
func TestEventsSendStats(t *testing.T) {
	s := newSystem(t, nil)
	s.echo(t, "a")
	s.echo(t, "b")
	testcluster.WaitFor(t, "two decisions on the calls page", func() bool {
		_, body := get(t, s.console+"/")
		return strings.Count(body, `data-outcome="completed"`) == 2
	})
	data := firstEvent(t, s.console, "stats")
	var st struct {
		Outcomes, Initiators map[string][]int
		Workers              []struct{ Name string }
		Duration             struct{ Counts []int }
	}
	if err := json.Unmarshal([]byte(data), &st); err != nil {
		t.Fatalf("stats %q: %v", data, err)
	}
	if total(st.Outcomes["completed"]) != 2 || total(st.Initiators["none"]) != 2 || total(st.Duration.Counts) != 2 ||
		len(st.Workers) != 1 || st.Workers[0].Name != "w1" {
		t.Errorf("stats %s, want two completed calls, their durations, and worker w1", data)
	}
}

// firstEvent reads the console's live feed until its first event named
// name, and returns that event's data.
func firstEvent(t *testing.T, console, name string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", console+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if sc.Text() == "event: "+name && sc.Scan() {
			return strings.TrimPrefix(sc.Text(), "data: ")
		}
	}
	t.Fatalf("the event stream ended without %s: %v", name, sc.Err())
	return ""
}

func total(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestCallsShowLastProgress: a sleep that reports a step every second
// shows its last progress on the calls page, on its call page (reached by
// its short id), and in a call-progress event of the live feed; a sleep
// whose first step is far off shows none.
func TestCallsShowLastProgress(t *testing.T) {
	s := newSystem(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	calls := make(chan error, 2)
	for _, steps := range []int{600, 1} {
		go func() { // waited for below
			_, err := s.mcp.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 600, "steps": steps}})
			calls <- err
		}()
	}
	defer func() { cancel(); <-calls; <-calls }()
	progressCell := regexp.MustCompile(`<td class="progress" data-progress-at="[0-9]+"[^>]*>[0-9]+/600 slept step [0-9]+ of 600 · <span class="ago">`)
	// stepping is the id of the row, within its own <tr>, that shows the
	// stepping sleep's progress; "" if none does.
	stepping := func(html string) string {
		for _, row := range strings.Split(html, `<tr id="call-`)[1:] {
			if row, _, _ = strings.Cut(row, "</tr>"); len(row) > 32 && progressCell.MatchString(row) {
				return row[:32]
			}
		}
		return ""
	}
	var page, id string
	testcluster.WaitFor(t, "the stepping sleep's progress on the calls page", func() bool {
		_, page = get(t, s.console+"/")
		id = stepping(page)
		return id != ""
	})
	if n := strings.Count(page, `<td class="progress none"`); n != 1 {
		t.Errorf("calls page has %d rows without progress, want 1 (the sleep of one step):\n%s", n, page)
	}
	if code, body := get(t, s.console+"/calls/"+id[:8]); code != http.StatusOK || !regexp.MustCompile(`last progress</td><td>[^<]+</td><td>[0-9]+/600 slept step [0-9]+ of 600 \(as of`).MatchString(body) {
		t.Errorf("call page of %s: %d, want its last progress as a timeline step:\n%s", id[:8], code, body)
	}

	data := firstEvent(t, s.console, "call-progress")
	var row struct{ ID, HTML string }
	if err := json.Unmarshal([]byte(data), &row); err != nil {
		t.Fatalf("call-progress %q: %v", data, err)
	}
	if row.ID != id || stepping(row.HTML) != id {
		t.Errorf("call-progress %s, want the stepping sleep %s's row with its progress", data, id)
	}
}
