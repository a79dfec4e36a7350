package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// event is one server-sent event: its name and a JSON payload.
type event struct {
	name string
	data any
}

// rowEvent carries a rendered table row.
type rowEvent struct {
	ID   string `json:"id"`
	HTML string `json:"html,omitempty"`
}

// events streams the live updates of the calls page: call-running and
// call-settled from WatchCalls, calls-synced once every running call was
// sent, call-progress when a call's last progress changed (every
// progressEvery), decision for each new audit record (from ?since=, Unix
// nanoseconds, so that nothing decided after the page was rendered is
// missed), and stats, the charts' data, at once and every statsEvery. The stream ends when the browser goes away or the coordinator
// ends a watch; the browser's EventSource then reconnects.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	since := c.opts.Now()
	if n, err := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64); err == nil {
		since = time.Unix(0, n)
	}
	canCancel := viewerOf(r).CanCancel
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out := make(chan event, 64)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.watchCalls(gctx, canCancel, out) })
	g.Go(func() error { return c.watchDecisions(gctx, since, out) })
	g.Go(func() error { return c.watchStats(gctx, out) })
	g.Go(func() error { return c.watchProgress(gctx, canCancel, out) })
	done := make(chan error, 1)
	go func() { done <- g.Wait() }() // owned: waited for below
	defer func() { cancel(); <-done }()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	rc := http.NewResponseController(w)
	if err := c.write(rc, w, []byte(": live\n\n")); err != nil {
		return
	}
	for {
		select {
		case ev := <-out:
			if err := c.send(rc, w, ev); err != nil {
				return
			}
		case err := <-done:
			done <- err // for the deferred wait
			if err != nil && ctx.Err() == nil {
				c.opts.Logger.Warn("console: a watch ended", "err", err)
			}
			return
		}
	}
}

// send writes one event, within the write timeout.
func (c *Console) send(rc *http.ResponseController, w http.ResponseWriter, ev event) error {
	b, err := json.Marshal(ev.data)
	if err != nil {
		return err
	}
	return c.write(rc, w, fmt.Appendf(nil, "event: %s\ndata: %s\n\n", ev.name, b))
}

func (c *Console) write(rc *http.ResponseController, w http.ResponseWriter, b []byte) error {
	rc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	if _, err := w.Write(b); err != nil {
		return err
	}
	return rc.Flush()
}

func (c *Console) watchCalls(ctx context.Context, canCancel bool, out chan<- event) error {
	stream, err := c.opts.Admin.WatchCalls(ctx, &pb.WatchCallsRequest{})
	if err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		var ev event
		switch m.GetEvent() {
		case pb.CallEvent_CALL_EVENT_RUNNING:
			html, err := c.fragment("call-row", newCallRow(m.GetCall(), canCancel))
			if err != nil {
				return err
			}
			ev = event{"call-running", rowEvent{m.GetCall().GetCall().GetCallId(), html}}
		case pb.CallEvent_CALL_EVENT_SETTLED:
			ev = event{"call-settled", rowEvent{ID: m.GetCall().GetCall().GetCallId()}}
		case pb.CallEvent_CALL_EVENT_SYNCED:
			ev = event{"calls-synced", rowEvent{}}
		default:
			continue
		}
		if err := emit(ctx, out, ev); err != nil {
			return err
		}
	}
}

// progressEvery is how often a live page lists the calls again for
// their progress: WatchCalls says when calls start and settle, not when
// they progress. Workers report progress once a heartbeat, so a faster
// refresh would show nothing new.
const progressEvery = 2 * time.Second

// watchProgress sends call-progress, the call's row rendered anew, for
// each running call whose last progress changed since the last listing.
// The script only replaces a row it shows, so a listing that crosses a
// call-settled brings no settled call back.
func (c *Console) watchProgress(ctx context.Context, canCancel bool, out chan<- event) error {
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	last := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		resp, err := c.opts.Admin.ListCalls(ctx, &pb.ListCallsRequest{})
		if err != nil {
			return err
		}
		now, seen := c.opts.Now(), map[string]time.Time{}
		for _, rc := range resp.GetCalls() {
			id, at := rc.GetCall().GetCallId(), rc.GetLastProgress()
			if at == nil {
				continue
			}
			seen[id] = at.AsTime()
			if last[id].Equal(at.AsTime()) {
				continue
			}
			html, err := c.fragment("call-row", newCallRow(rc, canCancel).withProgress(rc, now))
			if err != nil {
				return err
			}
			if err := emit(ctx, out, event{"call-progress", rowEvent{id, html}}); err != nil {
				return err
			}
		}
		last = seen
	}
}

func (c *Console) watchDecisions(ctx context.Context, since time.Time, out chan<- event) error {
	stream, err := c.opts.Coordinator.WatchAudit(ctx, &pb.WatchAuditRequest{Since: timestamppb.New(since)})
	if err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		row := newDecisionRow(m.GetRecord())
		html, err := c.fragment("decision-row", row)
		if err != nil {
			return err
		}
		if err := emit(ctx, out, event{"decision", rowEvent{row.Key, html}}); err != nil {
			return err
		}
	}
}

func emit(ctx context.Context, out chan<- event, ev event) error {
	select {
	case out <- ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fragment renders one of the layout's row templates.
func (c *Console) fragment(name string, data any) (string, error) {
	var buf bytes.Buffer
	err := c.pages["calls"].ExecuteTemplate(&buf, name, data)
	return buf.String(), err
}
