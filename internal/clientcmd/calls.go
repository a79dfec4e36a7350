package clientcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutCalls = `Lists the calls in flight, oldest first: the short CALL id ('mcpcancel
cancel' and 'audit list --call' take it), who called (PRINCIPAL), what
(TOOL: the tool, or the method and its target), on which WORKER, and how
long it has run (AGE). Settled calls are in 'mcpcancel audit list'.

With --watch it prints the calls in flight, then a line for every call that
starts or settles (EVENT: started, or how it settled), until interrupted
(SIGINT or SIGTERM ends it with status 0). With --json, one JSON object per
call (and per event) per line.

The time of a call's last progress is not shown: progress goes from the
worker to the gateway and never through the coordinator, so it does not
know it.`

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

// watchCalls prints the running calls, then each call that starts or
// settles, until ctx is done.
func watchCalls(ctx context.Context, admin pb.AdminServiceClient, addr string, p *callsPrinter) error {
	stream, err := admin.WatchCalls(ctx, &pb.WatchCallsRequest{})
	if err != nil {
		return tailErr(ctx, addr, err)
	}
	if err := p.flush(); err != nil { // the table's header
		return err
	}
	synced := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			return watchErr(ctx, addr, err)
		}
		switch resp.GetEvent() {
		case pb.CallEvent_CALL_EVENT_SYNCED:
			synced = true
			continue
		case pb.CallEvent_CALL_EVENT_RUNNING:
			event := "running"
			if synced {
				event = "started"
			}
			err = p.print(event, resp.GetCall(), time.Now())
		case pb.CallEvent_CALL_EVENT_SETTLED:
			err = p.print(settledAs(resp.GetCall().GetCall()), resp.GetCall(), time.Now())
		default:
			continue
		}
		if err := errors.Join(err, p.flush()); err != nil {
			return err
		}
	}
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
	{"EVENT", len("cancelled")}, {"CALL", shortCallID}, {"PRINCIPAL", 16}, {"TOOL", 16}, {"WORKER", 16}, {"AGE", 0},
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
}

func (p *callsPrinter) print(event string, rc *pb.RunningCall, now time.Time) error {
	c := rc.GetCall()
	age := callAge(rc, now)
	if !p.json {
		id := c.GetCallId()
		p.row([]string{event, id[:min(len(id), shortCallID)], c.GetPrincipal(), target(rc), c.GetWorker(), roundAge(age)})
		return nil
	}
	b, err := json.Marshal(runningJSON{
		Event: event, CallID: c.GetCallId(), Principal: c.GetPrincipal(), Method: callMethod(rc), Tool: c.GetTool(),
		Worker: c.GetWorker(), Gateway: c.GetGateway(), Requested: c.GetRequestedAt().AsTime(), AgeMillis: age.Milliseconds(),
	})
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
