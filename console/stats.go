package console

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// The calls page charts the last statsWindow in statsStep buckets, and a
// live page gets them anew every statsEvery. Each refresh reads the
// window's audit records (at most maxStatsRecords), the running calls and
// the workers from the coordinator: the charts show the whole fleet, not
// one replica, and cost one audit listing per viewer per refresh.
const (
	statsWindow     = 5 * time.Minute
	statsStep       = 5 * time.Second
	statsEvery      = 5 * time.Second
	maxStatsRecords = 10000
)

// latencyBounds are the histograms' upper bounds in seconds; a last bucket
// counts what is above them all.
var latencyBounds = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60}

// histogram counts values into latencyBounds.
type histogram struct {
	Bounds []float64 `json:"bounds"` // seconds
	Counts []int     `json:"counts"` // one more than Bounds: the last is above them all
}

func newHistogram() histogram {
	return histogram{Bounds: latencyBounds, Counts: make([]int, len(latencyBounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(h.Bounds, max(0, d.Seconds()))
	h.Counts[i]++
}

// workerLoad is one worker's running handlers.
type workerLoad struct {
	Name     string `json:"name"`
	Running  int32  `json:"running"`
	Capacity int32  `json:"capacity"`
	Draining bool   `json:"draining"`
}

// stats is what the calls page charts. Series have one value per bucket,
// oldest first; bucket i ends at Start + (i+1)*StepMs.
type stats struct {
	Start      int64            `json:"start"` // Unix milliseconds
	StepMs     int64            `json:"step_ms"`
	InFlight   []int            `json:"in_flight"`  // calls running at each bucket's end
	Outcomes   map[string][]int `json:"outcomes"`   // audit records by outcome, cancel_lost included
	Initiators map[string][]int `json:"initiators"` // decisions by initiator ("none" when the call completed)
	// StopLatency is from decision to handler stopped, of the decisions
	// whose stop was reported; Duration from request to decision.
	StopLatency histogram    `json:"stop_latency"`
	Duration    histogram    `json:"duration"`
	Workers     []workerLoad `json:"workers"`
	Records     int          `json:"records"`
	Truncated   bool         `json:"truncated"` // more records than maxStatsRecords: the oldest are charted
}

// stats reads what the charts need from the coordinator.
func (c *Console) stats(ctx context.Context) (*stats, error) {
	now := c.opts.Now()
	start := now.Add(-statsWindow).Truncate(statsStep)
	recs, truncated, err := c.recentRecords(ctx, start)
	if err != nil {
		return nil, err
	}
	calls, err := c.opts.Admin.ListCalls(ctx, &pb.ListCallsRequest{})
	if err != nil {
		return nil, err
	}
	workers, err := c.opts.Coordinator.ListWorkers(ctx, &pb.ListWorkersRequest{})
	if err != nil {
		return nil, err
	}
	st := buildStats(now, start, recs, calls.GetCalls(), workers.GetWorkers())
	st.Truncated = truncated
	return st, nil
}

// recentRecords lists the audit records settled since start, oldest
// first, at most maxStatsRecords of them.
func (c *Console) recentRecords(ctx context.Context, start time.Time) ([]*pb.AuditRecord, bool, error) {
	req := &pb.ListAuditRequest{Since: timestamppb.New(start), PageSize: 1000}
	var recs []*pb.AuditRecord
	for {
		resp, err := c.opts.Coordinator.ListAudit(ctx, req)
		if err != nil {
			return nil, false, err
		}
		recs = append(recs, resp.GetRecords()...)
		if len(recs) >= maxStatsRecords {
			return recs[:maxStatsRecords], true, nil
		}
		if resp.GetNextPageToken() == "" {
			return recs, false, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// buildStats buckets the records and running calls of the window that
// starts at start and ends at now.
func buildStats(now, start time.Time, recs []*pb.AuditRecord, running []*pb.RunningCall, workers []*pb.WorkerInfo) *stats {
	n := int(now.Sub(start)/statsStep) + 1
	st := &stats{
		Start: start.UnixMilli(), StepMs: statsStep.Milliseconds(),
		Outcomes: map[string][]int{}, Initiators: map[string][]int{},
		StopLatency: newHistogram(), Duration: newHistogram(), Records: len(recs),
	}
	bucket := func(t time.Time) int { return min(n-1, max(0, int(t.Sub(start)/statsStep))) }
	count := func(m map[string][]int, key string, t time.Time) {
		if m[key] == nil {
			m[key] = make([]int, n)
		}
		m[key][bucket(t)]++
	}
	var spans [][2]time.Time // requested, settled (zero: still running)
	for _, r := range recs {
		settled := r.GetSettledAt().AsTime()
		count(st.Outcomes, r.GetOutcome(), settled)
		if r.GetOutcome() == "cancel_lost" {
			continue
		}
		count(st.Initiators, cmp.Or(client.InitiatorName(r.GetInitiator()), "none"), settled)
		if r.GetRequestedAt() != nil {
			requested := r.GetRequestedAt().AsTime()
			st.Duration.observe(settled.Sub(requested))
			spans = append(spans, [2]time.Time{requested, settled})
		}
		if r.GetStoppedAt() != nil {
			st.StopLatency.observe(r.GetStoppedAt().AsTime().Sub(settled))
		}
	}
	for _, c := range running {
		spans = append(spans, [2]time.Time{c.GetCall().GetRequestedAt().AsTime(), {}})
	}
	ends := make([]time.Time, n)
	for i := range ends {
		ends[i] = start.Add(time.Duration(i+1) * statsStep)
		if ends[i].After(now) {
			ends[i] = now
		}
	}
	st.InFlight = runningAt(spans, ends)
	for _, w := range workers {
		st.Workers = append(st.Workers, workerLoad{w.GetName(), w.GetInFlight(), w.GetCapacity(), w.GetDraining()})
	}
	slices.SortFunc(st.Workers, func(a, b workerLoad) int { return cmp.Compare(a.Name, b.Name) })
	return st
}

// runningAt counts, at each of the ends, the spans that began by then and
// had not settled by then: those begun less those settled, from sorted
// times. A settlement stamped before its request (clocks apart) counts
// at the request.
func runningAt(spans [][2]time.Time, ends []time.Time) []int {
	var begun, settled []time.Time
	for _, s := range spans {
		begun = append(begun, s[0])
		if !s[1].IsZero() {
			settled = append(settled, latest(s[0], s[1]))
		}
	}
	slices.SortFunc(begun, time.Time.Compare)
	slices.SortFunc(settled, time.Time.Compare)
	out := make([]int, len(ends))
	for i, t := range ends {
		out[i] = countUpTo(begun, t) - countUpTo(settled, t)
	}
	return out
}

// countUpTo is how many of the sorted times are not after t.
func countUpTo(sorted []time.Time, t time.Time) int {
	i, found := slices.BinarySearchFunc(sorted, t, time.Time.Compare)
	for found && i < len(sorted) && sorted[i].Equal(t) {
		i++
	}
	return i
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// watchStats sends the charts' data at once and every statsEvery, until
// ctx ends. A refresh that fails is logged and skipped: the charts wait
// for the next.
func (c *Console) watchStats(ctx context.Context, out chan<- event) error {
	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	for {
		st, err := c.stats(ctx)
		switch {
		case err == nil:
			if err := emit(ctx, out, event{"stats", st}); err != nil {
				return err
			}
		case ctx.Err() == nil:
			c.opts.Logger.Warn("console: reading the charts' data", "err", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
