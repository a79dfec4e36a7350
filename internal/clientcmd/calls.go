package clientcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutCalls = `Lists the calls in flight, oldest first: the short CALL id ('mcpcancel
cancel' and 'audit list --call' take it), who called (PRINCIPAL), what
(TOOL: the tool, or the method and its target), on which WORKER, how long
it has run (AGE), and the last progress its handler reported (LAST
PROGRESS: progress/total, its message, and how long ago; '-' if none).
Settled calls are in 'mcpcancel audit list'.

Progress is as of each worker's last heartbeat, so it may be a few seconds
stale; a call shows its progress once it has run for a heartbeat interval.
Workers of a release without progress digests show none.

With --watch it prints the calls in flight, then a line for every call that
starts or settles (EVENT: started, or how it settled), until interrupted
(SIGINT or SIGTERM ends it with status 0). It also lists the calls again
every 2 seconds and prints a 'progress' line for each call whose last
progress changed. With --json, one JSON object per call (and per event)
per line.`

type callsFlags struct {
	coordinator string
	watch, json bool
	tls         tlsconfig.Files // an admin certificate
}

func RunCalls(ctx context.Context, s cmdline.Streams, args []string) error {
	o := &callsFlags{}
	f := cmdline.NewFlags(s, "calls", aboutCalls)
	f.StringVar(&o.coordinator, "coordinator", "127.0.0.1:7801", "coordinator `address`: HOST:PORT, dns:///NAME:PORT, or a comma-separated list")
	f.BoolVar(&o.watch, "watch", false, "after the list, print every call that starts or settles, until interrupted")
	f.BoolVar(&o.json, "json", false, "print one JSON object per line instead of a table")
	f.TLS(&o.tls)
	if err := f.Parse(args); err != nil {
		return err
	}
	conn, err := dialCoordinator(o.coordinator, o.tls)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer conn.Close()
	admin := pb.NewAdminServiceClient(conn)
	p := newCallsPrinter(s.Stdout, o.json, o.watch)
	if o.watch {
		return watchCalls(ctx, admin, o.coordinator, p)
	}
	resp, err := admin.ListCalls(ctx, &pb.ListCallsRequest{})
	if err != nil {
		return coordinatorErr(o.coordinator, err)
	}
	for _, c := range resp.GetCalls() {
		if err := p.print("", c, time.Now()); err != nil {
			return err
		}
	}
	if err := p.flush(); err != nil {
		return err
	}
	if len(resp.GetCalls()) == 0 && !o.json {
		fmt.Fprintln(s.Stderr, "No calls in flight.")
	}
	return nil
}

// progressRefresh is how often --watch lists the calls again to show
// their progress: WatchCalls reports calls starting and settling only.
const progressRefresh = 2 * time.Second

// watchCalls prints the running calls, then each call that starts or
// settles, and each change of a call's last progress, until ctx is done.
func watchCalls(ctx context.Context, admin pb.AdminServiceClient, addr string, p *callsPrinter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := admin.WatchCalls(ctx, &pb.WatchCallsRequest{})
	if err != nil {
		return tailErr(ctx, addr, err)
	}
	if err := p.flush(); err != nil { // the table's header
		return err
	}
	events := make(chan watchEvent)
	done := make(chan struct{})
	go receiveCalls(ctx, stream, events, done) // ends with ctx; waited for below
	defer func() { cancel(); <-done }()
	tick := time.NewTicker(progressRefresh)
	defer tick.Stop()
	w := &callsWatch{p: p, shown: map[string]*timestamppb.Timestamp{}}
	for {
		select {
		case ev := <-events:
			if ev.err != nil {
				return watchErr(ctx, addr, ev.err)
			}
			err = w.event(ev.resp)
		case <-tick.C:
			var resp *pb.ListCallsResponse
			if resp, err = admin.ListCalls(ctx, &pb.ListCallsRequest{}); err != nil {
				return watchErr(ctx, addr, err)
			}
			err = w.progress(resp.GetCalls())
		}
		if err := errors.Join(err, p.flush()); err != nil {
			return err
		}
	}
}

// watchEvent is what one Recv of a WatchCalls stream returned.
type watchEvent struct {
	resp *pb.WatchCallsResponse
	err  error
}

// receiveCalls passes on what stream carries until it ends or ctx is
// done, then closes done.
func receiveCalls(ctx context.Context, stream pb.AdminService_WatchCallsClient, out chan<- watchEvent, done chan<- struct{}) {
	defer close(done)
	for {
		resp, err := stream.Recv()
		select {
		case out <- watchEvent{resp, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// callsWatch is what --watch has printed: each running call shown, with
// the time of the last progress printed for it (nil: none).
type callsWatch struct {
	p      *callsPrinter
	synced bool
	shown  map[string]*timestamppb.Timestamp
}

func (w *callsWatch) event(resp *pb.WatchCallsResponse) error {
	rc := resp.GetCall()
	id := rc.GetCall().GetCallId()
	switch resp.GetEvent() {
	case pb.CallEvent_CALL_EVENT_SYNCED:
		w.synced = true
	case pb.CallEvent_CALL_EVENT_RUNNING:
		event := "running"
		if w.synced {
			event = "started"
		}
		w.shown[id] = rc.GetLastProgress()
		return w.p.print(event, rc, time.Now())
	case pb.CallEvent_CALL_EVENT_SETTLED:
		delete(w.shown, id)
		return w.p.print(settledAs(rc.GetCall()), rc, time.Now())
	}
	return nil
}

// progress prints a progress line for each shown call whose last
// progress is newer than the one printed.
func (w *callsWatch) progress(calls []*pb.RunningCall) error {
	for _, rc := range calls {
		id := rc.GetCall().GetCallId()
		last, ok := w.shown[id]
		at := rc.GetLastProgress()
		if !ok || at == nil || last != nil && !at.AsTime().After(last.AsTime()) {
			continue
		}
		w.shown[id] = at
		if err := w.p.print("progress", rc, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// watchErr is how a watch ends: interrupted, it ends well.
func watchErr(ctx context.Context, addr string, err error) error {
	if errors.Is(err, io.EOF) && ctx.Err() == nil {
		return fmt.Errorf("the coordinator at %s ended the watch", addr)
	}
	return tailErr(ctx, addr, err)
}

// settledAs names how a call settled: completed, cancelled or failed.
func settledAs(c *pb.Call) string {
	switch c.GetState() {
	case pb.CallState_CALL_STATE_COMPLETED:
		return "completed"
	case pb.CallState_CALL_STATE_CANCELLED:
		return "cancelled"
	case pb.CallState_CALL_STATE_FAILED:
		return "failed"
	}
	return "settled"
}

// callsPrinter prints running calls as a table or as JSON lines; with
// events (--watch) each row starts with what happened, and cells are
// padded so that rows flushed one at a time line up.
type callsPrinter struct {
	out    io.Writer
	json   bool
	events bool
	tw     *tabwriter.Writer
}

// callsColumns are the table's columns and the widths --watch pads them
// to; EVENT only with --watch.
var callsColumns = []struct {
	name  string
	width int
}{
	{"EVENT", len("cancelled")}, {"CALL", shortCallID}, {"PRINCIPAL", 16}, {"TOOL", 16}, {"WORKER", 16}, {"AGE", 8}, {"LAST PROGRESS", 0},
}

func newCallsPrinter(out io.Writer, asJSON, events bool) *callsPrinter {
	p := &callsPrinter{out: out, json: asJSON, events: events}
	if asJSON {
		return p
	}
	p.tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	var header []string
	for _, c := range callsColumns {
		header = append(header, c.name)
	}
	p.row(header)
	return p
}

// runningJSON is a call in flight as --json prints it.
type runningJSON struct {
	Event     string    `json:"event,omitempty"`
	CallID    string    `json:"call_id"`
	Principal string    `json:"principal"`
	Method    string    `json:"method"`
	Tool      string    `json:"tool"`
	Worker    string    `json:"worker"`
	Gateway   string    `json:"gateway"`
	Requested time.Time `json:"requested_at"`
	AgeMillis int64     `json:"age_ms"`
	// The last progress reported, when there is one.
	LastProgress    *time.Time `json:"last_progress_at,omitempty"`
	Progress        *float64   `json:"progress,omitempty"`
	Total           float64    `json:"total,omitempty"`
	ProgressMessage string     `json:"progress_message,omitempty"`
}

func (p *callsPrinter) print(event string, rc *pb.RunningCall, now time.Time) error {
	c := rc.GetCall()
	age := callAge(rc, now)
	if !p.json {
		id := c.GetCallId()
		p.row([]string{event, id[:min(len(id), shortCallID)], c.GetPrincipal(), target(rc), c.GetWorker(), roundAge(age), lastProgress(rc, now)})
		return nil
	}
	j := runningJSON{
		Event: event, CallID: c.GetCallId(), Principal: c.GetPrincipal(), Method: callMethod(rc), Tool: c.GetTool(),
		Worker: c.GetWorker(), Gateway: c.GetGateway(), Requested: c.GetRequestedAt().AsTime(), AgeMillis: age.Milliseconds(),
	}
	if at := rc.GetLastProgress(); at != nil {
		t, p := at.AsTime(), rc.GetProgress()
		j.LastProgress, j.Progress, j.Total, j.ProgressMessage = &t, &p, rc.GetTotal(), rc.GetProgressMessage()
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = p.out.Write(append(b, '\n'))
	return err
}

// callAge is how long the call has run: from its request to now, or to
// its settlement once settled.
func callAge(rc *pb.RunningCall, now time.Time) time.Duration {
	c := rc.GetCall()
	if c.GetRequestedAt() == nil {
		return rc.GetAge().AsDuration()
	}
	end := now
	if c.GetSettledAt() != nil {
		end = c.GetSettledAt().AsTime()
	}
	return end.Sub(c.GetRequestedAt().AsTime())
}

func callMethod(rc *pb.RunningCall) string {
	if m := rc.GetCall().GetMethod(); m != "" {
		return m
	}
	if m := rc.GetMethod(); m != "" {
		return m
	}
	return "tools/call"
}

// target is the TOOL cell: the tool of a tools/call, else the method and
// what it names.
func target(rc *pb.RunningCall) string {
	if m := callMethod(rc); m != "tools/call" {
		return strings.TrimSpace(m + " " + rc.GetCall().GetTool())
	}
	return rc.GetCall().GetTool()
}

// lastProgress is the LAST PROGRESS cell: progress/total, the message
// quoted, and how long ago, as in 3/10 "fetching" 4s ago; empty if none.
func lastProgress(rc *pb.RunningCall, now time.Time) string {
	at := rc.GetLastProgress()
	if at == nil {
		return ""
	}
	amount := strconv.FormatFloat(rc.GetProgress(), 'g', -1, 64)
	if t := rc.GetTotal(); t > 0 {
		amount += "/" + strconv.FormatFloat(t, 'g', -1, 64)
	}
	if m := rc.GetProgressMessage(); m != "" {
		amount += " " + strconv.Quote(m)
	}
	return amount + " " + roundAge(max(0, now.Sub(at.AsTime()))) + " ago"
}

// roundAge shows an age to the second, or to the millisecond below one.
func roundAge(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func (p *callsPrinter) row(cells []string) {
	if !p.events {
		cells = cells[1:]
	}
	cols := callsColumns
	if !p.events {
		cols = cols[1:]
	}
	for i, c := range cells {
		if c == "" {
			c = "-"
		}
		if p.events {
			c = fmt.Sprintf("%-*s", cols[i].width, c)
		}
		cells[i] = c
	}
	fmt.Fprintln(p.tw, strings.Join(cells, "\t"))
}

func (p *callsPrinter) flush() error {
	if p.tw == nil {
		return nil
	}
	return p.tw.Flush()
}
