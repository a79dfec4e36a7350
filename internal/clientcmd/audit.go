package clientcmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutAudit = `Shows the audit: one record per decided call (outcome completed, cancelled
or failed) and one per cancellation that came after the decision
(cancel_lost). 'audit list' prints the records kept, oldest first; 'audit
tail' prints new ones as they are written, until interrupted.`

const aboutAuditList = `Lists the newest audit records (--limit, default 100), oldest of them
first: one per decided call (completed, cancelled or failed) and one per
cancellation that came after the decision (cancel_lost). It says on stderr
how many older records it left out. --call takes a call id or the short id
the table prints. With --json, one JSON object per line, as log shippers
see them.`

const aboutAuditTail = `Prints audit records as they are written, until interrupted (SIGINT or
SIGTERM ends it with status 0). With --since, it first prints the records
settled that recently. With --json, one JSON object per line.`

// auditOutcomes are the outcomes --outcome accepts.
var auditOutcomes = []string{"completed", "tool_error", "cancelled", "failed", "cancel_lost"}

// auditInitiators are the initiators --initiator accepts.
var auditInitiators = []string{"client", "timeout", "disconnect", "shutdown", "operator", "worker_lost", "tool"}

// recordMethod is the MCP method of an audited call. Records do not name
// it: the coordinator records only tools/call today.
func recordMethod(*pb.AuditRecord) string { return "tools/call" }

// ErrNoAuditVerb means `mcpcancel audit` was not told list or tail.
var ErrNoAuditVerb = errors.New("audit needs a subcommand: list or tail")

// maxAuditPage is the most records one ListAudit returns.
const maxAuditPage = 1000

type auditFlags struct {
	coordinator, call, tool, outcome string
	principal, initiator, method     string
	json                             bool
	since                            time.Duration
	limit                            int
	tls                              tlsconfig.Files // an admin certificate
}

// runAudit runs `audit list` or `audit tail`. The verb comes first, as
// flags.parse accepts no positional arguments.
func RunAudit(ctx context.Context, s cmdline.Streams, args []string) error {
	if len(args) == 0 {
		return cmdline.Usage(ErrNoAuditVerb)
	}
	switch verb := args[0]; {
	case cmdline.IsHelpFlag(verb):
		fmt.Fprintf(s.Stdout, "Usage: mcpcancel audit list|tail [flags]\n\n%s\n\n"+
			"Run 'mcpcancel audit list --help' or 'mcpcancel audit tail --help' for the flags.\n", aboutAudit)
		return flag.ErrHelp
	case verb == "list":
		return auditList(ctx, s, args[1:])
	case verb == "tail":
		return auditTail(ctx, s, args[1:])
	default:
		return cmdline.Usage(fmt.Errorf("unknown audit subcommand %q: want list or tail", verb))
	}
}

func parseAuditFlags(s cmdline.Streams, verb, about string, args []string) (*auditFlags, error) {
	o := &auditFlags{}
	f := cmdline.NewFlags(s, "audit "+verb, about)
	f.StringVar(&o.coordinator, "coordinator", "127.0.0.1:7801", "coordinator `address`: HOST:PORT, dns:///NAME:PORT, or a comma-separated list")
	f.BoolVar(&o.json, "json", false, "print one JSON object per line instead of a table")
	f.TLS(&o.tls)
	f.StringVar(&o.call, "call", "", "only the records of the call with this `id`, or whose id starts with it (the table's short CALL)")
	f.StringVar(&o.principal, "principal", "", "only the records of calls by this `principal`")
	f.StringVar(&o.initiator, "initiator", "", "only records decided by this `initiator`: "+strings.Join(auditInitiators, ", "))
	f.StringVar(&o.method, "method", "", "only the records of calls of this MCP `method`, e.g. tools/call")
	f.StringVar(&o.tool, "tool", "", "only the records of calls to this tool `name`")
	f.StringVar(&o.outcome, "outcome", "", "only records with this `outcome`: "+strings.Join(auditOutcomes, ", "))
	sinceZero := "all"
	if verb == "tail" {
		sinceZero = "only new ones"
	}
	f.DurationVar(&o.since, "since", 0, "only records settled within this `duration` before now, e.g. 10m (0: "+sinceZero+")")
	if verb == "list" {
		f.IntVar(&o.limit, "limit", 100, "print the newest `N` records (0: all)")
	}
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	return o, o.check(verb)
}

func (o *auditFlags) check(verb string) error {
	switch {
	case o.outcome != "" && !slices.Contains(auditOutcomes, o.outcome):
		return cmdline.Usage(fmt.Errorf("--outcome %q: want one of %s", o.outcome, strings.Join(auditOutcomes, ", ")))
	case o.initiator != "" && !slices.Contains(auditInitiators, o.initiator):
		return cmdline.Usage(fmt.Errorf("--initiator %q: want one of %s", o.initiator, strings.Join(auditInitiators, ", ")))
	case !isCallIDPrefix(o.call):
		return cmdline.Usage(fmt.Errorf("--call %q: want a call id or its start, in hex, as the CALL column shows it", o.call))
	case o.since < 0:
		return cmdline.Usage(fmt.Errorf("--since must not be negative, not %v", o.since))
	case verb == "list" && o.limit < 0:
		return cmdline.Usage(fmt.Errorf("--limit must not be negative, not %d (0 lists all)", o.limit))
	}
	return nil
}

// callIDLen is the length of a full call id.
const callIDLen = 32

// isCallIDPrefix says whether s is a call id or its start: hex digits.
func isCallIDPrefix(s string) bool {
	return len(s) <= callIDLen && strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}

// request is the ListAudit request for the filters: the coordinator
// applies them all. matches applies them again, as a coordinator older
// than some of them ignores those.
func (o *auditFlags) request(now time.Time) *pb.ListAuditRequest {
	return &pb.ListAuditRequest{
		Since: o.sinceTime(now), Tool: o.tool, Outcome: o.outcome, Principal: o.principal,
		Initiator: client.InitiatorFromName(o.initiator), Method: o.method, CallIdPrefix: strings.ToLower(o.call),
	}
}

// sinceTime is the --since cutoff, or nil for none.
func (o *auditFlags) sinceTime(now time.Time) *timestamppb.Timestamp {
	if o.since == 0 {
		return nil
	}
	return timestamppb.New(now.Add(-o.since))
}

// matches applies the filters to a record.
func (o *auditFlags) matches(r *pb.AuditRecord, since *timestamppb.Timestamp) bool {
	return strings.HasPrefix(r.GetCallId(), strings.ToLower(o.call)) &&
		(o.principal == "" || r.GetPrincipal() == o.principal) &&
		(o.initiator == "" || client.InitiatorName(r.GetInitiator()) == o.initiator) &&
		(o.method == "" || recordMethod(r) == o.method) &&
		(o.tool == "" || r.GetTool() == o.tool) &&
		(o.outcome == "" || r.GetOutcome() == o.outcome) &&
		(since == nil || !r.GetSettledAt().AsTime().Before(since.AsTime()))
}

func auditList(ctx context.Context, s cmdline.Streams, args []string) error {
	o, err := parseAuditFlags(s, "list", aboutAuditList, args)
	if err != nil {
		return err
	}
	conn, err := dialCoordinator(o.coordinator, o.tls)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer conn.Close()
	c := pb.NewCoordinatorServiceClient(conn)
	now := time.Now()
	req := o.request(now)
	newest := newestN{n: o.limit}
	since := req.GetSince()
	err = listAudit(ctx, c, req, func(r *pb.AuditRecord) error {
		if o.matches(r, since) {
			newest.add(r)
		}
		return nil
	})
	if err != nil {
		return coordinatorErr(o.coordinator, err)
	}
	p := newAuditPrinter(s.Stdout, o.json, false)
	for _, r := range newest.records() {
		if err := p.print(r); err != nil {
			return err
		}
	}
	if err := p.flush(); err != nil {
		return err
	}
	if left := newest.leftOut(); left > 0 {
		fmt.Fprintf(s.Stderr, "%d older matching records left out: these are the newest %d of %d (--limit N shows more, --limit 0 all).\n", left, o.limit, newest.seen)
	}
	return nil
}

// newestN keeps the last n records it is given (all, when n is 0) and
// counts the rest.
type newestN struct {
	n    int
	seen int
	ring []*pb.AuditRecord
}

func (k *newestN) add(r *pb.AuditRecord) {
	k.seen++
	if k.n == 0 || len(k.ring) < k.n {
		k.ring = append(k.ring, r)
		return
	}
	k.ring[(k.seen-1)%k.n] = r
}

// records are the kept records, oldest first.
func (k *newestN) records() []*pb.AuditRecord {
	if k.n == 0 || k.seen <= k.n {
		return k.ring
	}
	start := k.seen % k.n
	return append(slices.Clone(k.ring[start:]), k.ring[:start]...)
}

func (k *newestN) leftOut() int { return k.seen - len(k.ring) }

// listAudit pages through every record ListAudit returns for req, oldest
// first, calling emit for each.
func listAudit(ctx context.Context, c pb.CoordinatorServiceClient, req *pb.ListAuditRequest, emit func(*pb.AuditRecord) error) error {
	req.PageSize = maxAuditPage
	for {
		resp, err := c.ListAudit(ctx, req)
		if err != nil {
			return err
		}
		for _, r := range resp.GetRecords() {
			if err := emit(r); err != nil {
				return err
			}
		}
		if resp.GetNextPageToken() == "" {
			return nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func auditTail(ctx context.Context, s cmdline.Streams, args []string) error {
	o, err := parseAuditFlags(s, "tail", aboutAuditTail, args)
	if err != nil {
		return err
	}
	conn, err := dialCoordinator(o.coordinator, o.tls)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer conn.Close()
	since := o.sinceTime(time.Now())
	stream, err := pb.NewCoordinatorServiceClient(conn).WatchAudit(ctx, &pb.WatchAuditRequest{Since: since})
	if err != nil {
		return tailErr(ctx, o.coordinator, err)
	}
	p := newAuditPrinter(s.Stdout, o.json, true)
	if err := p.flush(); err != nil { // the table's header
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return tailErr(ctx, o.coordinator, err)
		}
		if !o.matches(resp.GetRecord(), since) {
			continue
		}
		if err := p.print(resp.GetRecord()); err != nil {
			return err
		}
		if err := p.flush(); err != nil {
			return err
		}
	}
}

// tailErr is how a tail ends: interrupted, it ends well.
func tailErr(ctx context.Context, addr string, err error) error {
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, io.EOF):
		return fmt.Errorf("the coordinator at %s ended the audit stream", addr)
	default:
		return coordinatorErr(addr, err)
	}
}

// coordinatorErr turns a failed RPC into a message for the user.
func coordinatorErr(addr string, err error) error {
	st, ok := status.FromError(err)
	switch {
	case !ok:
		return err
	case st.Code() == codes.Unavailable:
		return fmt.Errorf("cannot reach the coordinator at %s: %s (is `mcpcancel dev` running? --coordinator names another address)", addr, st.Message())
	case st.Code() == codes.Canceled:
		return errors.New("interrupted")
	default:
		return fmt.Errorf("the coordinator at %s: %s", addr, st.Message())
	}
}

// auditPrinter prints records as JSON lines or as a table.
type auditPrinter struct {
	out  io.Writer
	json bool
	tw   *tabwriter.Writer
	// fixed pads each cell to its column's usual width, so that rows
	// flushed one at a time (by tail) line up.
	fixed bool
}

// auditColumns are the table's columns and the widths tail pads them to.
var auditColumns = []struct {
	name  string
	width int
}{
	{"SETTLED", len(settledLayout)}, {"OUTCOME", len("cancel_lost")}, {"INITIATOR", len("worker_lost")},
	{"TOOL", 12}, {"REQUEST", 20}, {"CALL", 8}, {"STOP", 8}, {"REASON", 0},
}

const (
	settledLayout  = "2006-01-02 15:04:05.000"
	maxReasonRunes = 40
	shortCallID    = 8
)

func newAuditPrinter(out io.Writer, asJSON, fixed bool) *auditPrinter {
	p := &auditPrinter{out: out, json: asJSON, fixed: fixed}
	if asJSON {
		return p
	}
	p.tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	var header []string
	for _, c := range auditColumns {
		header = append(header, c.name)
	}
	p.row(header)
	return p
}

func (p *auditPrinter) print(r *pb.AuditRecord) error {
	a := client.AuditFromProto(r)
	if !p.json {
		p.row(auditRow(a))
		return nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("audit record of call %s: %w", a.CallID, err)
	}
	_, err = p.out.Write(append(b, '\n'))
	return err
}

func (p *auditPrinter) row(cells []string) {
	if p.fixed {
		for i, c := range auditColumns {
			cells[i] = fmt.Sprintf("%-*s", c.width, cells[i])
		}
	}
	fmt.Fprintln(p.tw, strings.Join(cells, "\t"))
}

func (p *auditPrinter) flush() error {
	if p.tw == nil {
		return nil
	}
	return p.tw.Flush()
}

// auditRow is a record's table row; an empty cell shows as "-".
func auditRow(a *client.AuditRecord) []string {
	cells := []string{
		a.SettledAt.Local().Format(settledLayout),
		a.Outcome,
		a.Initiator,
		a.Tool,
		a.Scope + "/" + string(a.RequestID),
		a.CallID[:min(len(a.CallID), shortCallID)],
		stopDelay(a),
		truncate(a.Reason, maxReasonRunes),
	}
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	return cells
}

// stopDelay is how long after the decision the handler returned, "-" while
// that is not known. It is negative when the handler returned first, as a
// completing one does.
func stopDelay(a *client.AuditRecord) string {
	if a.StoppedAt == nil {
		return "-"
	}
	d := a.StoppedAt.Sub(a.SettledAt)
	if d.Abs() >= time.Millisecond {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// truncate cuts s to at most n runes, the last an ellipsis if it was cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
