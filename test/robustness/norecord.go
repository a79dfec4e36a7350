package robustness

// Calls with no record (DESIGN section 4: every call anyone saw has a
// record). A call runs before its record is durable, but nothing of it
// reaches its client before then; each loss inside that window still
// leaves a record (a lost worker: the gateway fails the call by
// placement; a lost gateway: the worker settles it as caller gone). Only
// both lost in the window may leave none, and then the client saw
// nothing of the call. So a call the client saw anything of (progress,
// a result, an error that is not a refusal to place it) has a record,
// unless its gateway and a worker were both killed after it went out
// and before the client saw it. The checker cannot name the worker of a
// call etcd never held: any worker killed in that span excuses it.

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// VSeenWithoutRecord is a call its client saw that etcd never held.
const VSeenWithoutRecord = "seen_without_record"

// refusals are the gateway's answers to a call it did not place (or
// placed and could not record, telling the client it never started):
// nothing of such a call was shown, and it may have no record.
// (Busy is a tool error result, the rest JSON-RPC errors.)
var refusals = []string{
	"could not be started",
	"is already in flight",
	"the session was closed",
	"is busy; try again shortly",
	"unknown tool",
	"too many calls in flight",
	"calls in flight; try again shortly",
	"the gateway is shutting down",
}

func refusal(r Response) bool {
	if r.Kind == "result" {
		return false
	}
	for _, s := range refusals {
		if strings.Contains(strings.ToLower(r.Text), strings.ToLower(s)) {
			return true
		}
	}
	return false
}

// firstSight is when the client first saw something of the call other
// than a refusal: zero if it saw nothing.
func (c *ClientCall) firstSight() time.Time {
	var first time.Time
	see := func(t time.Time) {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	for _, p := range c.Progress {
		see(p)
	}
	for _, r := range c.Responses {
		if !refusal(r) {
			see(r.At)
		}
	}
	return first
}

// killedBoth says the call's gateway and some worker were both killed
// between from and to.
func (h *History) killedBoth(gateway string, from, to time.Time) bool {
	var gw, worker bool
	for _, k := range h.Kills {
		if k.At.Before(from) || k.At.After(to) {
			continue
		}
		gw = gw || (k.Kind == "gateway" && k.Name == gateway)
		worker = worker || k.Kind == "worker"
	}
	return gw && worker
}

// noRecord is what the checker found of calls seen with no record.
type noRecord struct {
	seen, excused int
	vs            []Violation
}

// checkRecorded checks that every call a client saw has a record.
func checkRecorded(h *History, byKey map[string]*ServerCall) noRecord {
	var out noRecord
	for _, c := range h.Client {
		seen := c.firstSight()
		if seen.IsZero() || byKey[clientKey(c)] != nil {
			continue
		}
		out.seen++
		if h.killedBoth(c.Gateway, c.Sent, seen) {
			out.excused++
			continue
		}
		if slices.ContainsFunc(c.Responses, func(r Response) bool { return r.Kind == "result" }) {
			continue // result_without_call says it, and nothing excuses it
		}
		out.vs = append(out.vs, Violation{Kind: VSeenWithoutRecord, Subject: c.Ref, Client: c,
			Detail: fmt.Sprintf("the client saw the call %v after sending it (%s), but etcd never held its record, and its gateway %s and a worker were not both killed meanwhile",
				seen.Sub(c.Sent), sightKind(c), c.Gateway)})
	}
	return out
}

func sightKind(c *ClientCall) string {
	var parts []string
	if n := len(c.Progress); n > 0 {
		parts = append(parts, fmt.Sprintf("%d progress", n))
	}
	for _, r := range c.Responses {
		if !refusal(r) {
			parts = append(parts, fmt.Sprintf("%s %q", r.Kind, r.Text))
		}
	}
	return strings.Join(parts, ", ")
}
