package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

const (
	timeLayout    = "2006-01-02 15:04:05.000"
	shortID       = 8
	feedSize      = 25  // decisions on the calls page
	maxSearchRows = 200 // rows audit search shows
)

var funcs = template.FuncMap{
	"short": func(id string) string { return id[:min(len(id), shortID)] },
	"when":  func(t time.Time) string { return t.Local().Format(timeLayout) },
	"state": func(s pb.CallState) string { return strings.ToLower(strings.TrimPrefix(s.String(), "CALL_STATE_")) },
}

// callRow is a running call as the pages show it.
type callRow struct {
	ID, Principal, Method, Tool, Worker, Gateway string
	Started                                      time.Time
	StartedMs                                    int64 // for the script that ages it
	Age                                          string
	Scope, RequestID                             string
	CanCancel                                    bool
	// Progress is the last progress reported ("3/10 fetching"), empty if
	// none; ProgressMs when, for the script that ages it.
	Progress    string
	ProgressAgo string
	ProgressMs  int64
}

func newCallRow(c *pb.RunningCall, canCancel bool) callRow {
	call := c.GetCall()
	started := call.GetRequestedAt().AsTime()
	return callRow{
		ID: call.GetCallId(), Principal: call.GetPrincipal(), Method: c.GetMethod(), Tool: call.GetTool(),
		Worker: call.GetWorker(), Gateway: call.GetGateway(), Started: started, StartedMs: started.UnixMilli(),
		Age: c.GetAge().AsDuration().Round(100 * time.Millisecond).String(), CanCancel: canCancel,
		Scope: call.GetKey().GetScope(), RequestID: requestID(call.GetKey().GetRequestId()),
	}
}

// withProgress sets the row's progress cell from rc, as of now.
func (r callRow) withProgress(rc *pb.RunningCall, now time.Time) callRow {
	if at := rc.GetLastProgress(); at != nil {
		r.Progress = progressText(rc)
		r.ProgressAgo = max(0, now.Sub(at.AsTime())).Round(100*time.Millisecond).String() + " ago"
		r.ProgressMs = at.AsTime().UnixMilli()
	}
	return r
}

// progressText is a call's last progress: progress/total and message.
func progressText(rc *pb.RunningCall) string {
	t := strconv.FormatFloat(rc.GetProgress(), 'g', -1, 64)
	if total := rc.GetTotal(); total > 0 {
		t += "/" + strconv.FormatFloat(total, 'g', -1, 64)
	}
	if m := rc.GetProgressMessage(); m != "" {
		t += " " + m
	}
	return t
}

// decisionRow is an audit record as the pages show it.
type decisionRow struct {
	Key, ID, Outcome, Initiator, Tool, Principal, Worker, Reason string
	Settled                                                      time.Time
	Stopped                                                      string
}

func newDecisionRow(r *pb.AuditRecord) decisionRow {
	a := client.AuditFromProto(r)
	d := decisionRow{
		Key: a.CallID + "-" + a.Outcome, ID: a.CallID, Outcome: a.Outcome, Initiator: a.Initiator,
		Tool: a.Tool, Principal: a.Principal, Worker: a.Worker, Reason: a.Reason, Settled: a.SettledAt, Stopped: "-",
	}
	if a.StoppedAt != nil {
		d.Stopped = a.StoppedAt.Sub(a.SettledAt).Round(time.Millisecond).String()
	}
	return d
}

// requestID renders a request id as its client sent it.
func requestID(id *pb.RequestId) string { return string(client.RequestIDJSON(id)) }

type page struct {
	Title  string
	Nav    string
	Viewer Viewer
	Data   any
}

// render executes a page into a buffer first, so a failed render is an
// error page, not half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", page{title, name, viewerOf(r), data}); err != nil {
		c.opts.Logger.Error("console: rendering", "page", name, "err", err)
		http.Error(w, "The page could not be rendered.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// fail shows a coordinator error to the viewer.
func (c *Console) fail(w http.ResponseWriter, what string, err error) {
	c.opts.Logger.Warn("console: "+what, "err", err)
	http.Error(w, fmt.Sprintf("Cannot %s: %s", what, status.Convert(err).Message()), http.StatusBadGateway)
}

type callsData struct {
	Calls     []callRow
	Decisions []decisionRow
	Since     int64 // the feed continues from here (Unix nanoseconds)
}

func (c *Console) callsPage(w http.ResponseWriter, r *http.Request) {
	now := c.opts.Now()
	calls, err := c.opts.Admin.ListCalls(r.Context(), &pb.ListCallsRequest{})
	if err != nil {
		c.fail(w, "list the running calls", err)
		return
	}
	d := callsData{Since: now.UnixNano()}
	for _, rc := range calls.GetCalls() {
		d.Calls = append(d.Calls, newCallRow(rc, viewerOf(r).CanCancel).withProgress(rc, now))
	}
	recent, _, err := c.search(r, &pb.ListAuditRequest{Since: timestamppb.New(now.Add(-time.Hour))}, nil, feedSize)
	if err != nil {
		c.fail(w, "read the audit", err)
		return
	}
	for _, rec := range recent {
		d.Decisions = append(d.Decisions, newDecisionRow(rec))
	}
	c.render(w, r, "calls", "In flight", d)
}

// search pages through ListAudit for req, keeps the records keep admits
// (nil: all), and returns the newest n of them, newest first, and how
// many older ones it left out.
func (c *Console) search(r *http.Request, req *pb.ListAuditRequest, keep func(*pb.AuditRecord) bool, n int) ([]*pb.AuditRecord, int, error) {
	var all []*pb.AuditRecord
	total := 0
	req.PageSize = 1000
	for {
		resp, err := c.opts.Coordinator.ListAudit(r.Context(), req)
		if err != nil {
			return nil, 0, err
		}
		for _, rec := range resp.GetRecords() {
			if keep == nil || keep(rec) {
				all = append(all, rec)
				total++
			}
		}
		if len(all) > 4*n { // bound memory: keep the newest
			all = slices.Delete(all, 0, len(all)-n)
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	all = all[max(0, len(all)-n):]
	slices.Reverse(all)
	return all, total - len(all), nil
}

type workersData struct{ Workers []*pb.WorkerInfo }

func (c *Console) workersPage(w http.ResponseWriter, r *http.Request) {
	resp, err := c.opts.Coordinator.ListWorkers(r.Context(), &pb.ListWorkersRequest{})
	if err != nil {
		c.fail(w, "list the workers", err)
		return
	}
	c.render(w, r, "workers", "Workers", workersData{resp.GetWorkers()})
}

// cancel is the operator cancel button. A script's fetch is answered with
// JSON; a plain form post is sent back to the calls page.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	if !v.CanCancel {
		http.Error(w, "You may look but not cancel: that needs the operator role.", http.StatusForbidden)
		return
	}
	id := r.PathValue("id")
	resp, err := c.opts.Admin.OperatorCancel(r.Context(), &pb.OperatorCancelRequest{
		CallId: id, Reason: strings.TrimSpace(r.FormValue("reason")), OnBehalfOf: v.Name,
	})
	if err != nil {
		c.fail(w, "cancel call "+id, err)
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/json") {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{
		"result": strings.ToLower(strings.TrimPrefix(resp.GetResult().String(), "CANCEL_RESULT_")),
		"reason": resp.GetReason(),
	})
}
