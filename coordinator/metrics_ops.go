package coordinator

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// addOps makes the metrics operators alert on (docs/operations.md): how
// fast handlers stop, how fast etcd commits, and whether the janitor runs.
func (m *metrics) addOps() {
	m.stopLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mcpcancel_coordinator_stop_latency_seconds",
		Help:    "From a call's decision (settled_at) to its handler returning (stopped_at), as the audit records them, by outcome; 0 when the handler returned first.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 9), // 1ms .. 65s
	}, []string{"outcome"})
	m.commitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mcpcancel_coordinator_etcd_commit_duration_seconds",
		Help:    "Each etcd Txn the group committer sent (a batch of decisions, or one alone), from send to answer.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms .. 4s
	})
	m.janitorLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mcpcancel_coordinator_janitor_leader",
		Help: "1 while this replica is the elected janitor, else 0.",
	})
	m.janitorErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mcpcancel_coordinator_janitor_errors_total",
		Help: "Janitor rounds that failed (a read or a settle did not go through); the round is tried again.",
	})
	m.overdue = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mcpcancel_coordinator_overdue_calls",
		Help: "Running calls a lease TTL past their deadline in the janitor's latest round (the leading replica only; 0 elsewhere).",
	})
}

// stopped observes the stop latency of one call.
func (m *metrics) stopped(outcome string, settled, stopped time.Time) {
	m.stopLatency.WithLabelValues(outcome).Observe(max(0, stopped.Sub(settled)).Seconds())
}

// toolWorkers reports, per tool, the live workers that accept calls for
// it (not draining). A tool keeps its series at 0 once its last worker
// has gone, for as long as the replica runs: that is the moment to alert.
type toolWorkers struct {
	v    *view
	desc *prometheus.Desc

	mu   sync.Mutex
	seen map[string]bool // guarded by mu
}

func newToolWorkers(v *view) *toolWorkers {
	return &toolWorkers{v: v, seen: map[string]bool{}, desc: prometheus.NewDesc(
		"mcpcancel_coordinator_tool_workers",
		"Live workers offering a tool and accepting calls (not draining), as this replica sees them; 0 for a tool whose workers all went.",
		[]string{"tool"}, nil)}
}

func (t *toolWorkers) Describe(ch chan<- *prometheus.Desc) { ch <- t.desc }

func (t *toolWorkers) Collect(ch chan<- prometheus.Metric) {
	counts := t.count()
	t.mu.Lock()
	for tool := range counts {
		t.seen[tool] = true
	}
	tools := slices.Sorted(maps.Keys(t.seen))
	t.mu.Unlock()
	for _, tool := range tools {
		ch <- prometheus.MustNewConstMetric(t.desc, prometheus.GaugeValue, float64(counts[tool]), tool)
	}
}

func (t *toolWorkers) count() map[string]int {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	counts := map[string]int{}
	for _, e := range t.v.workers {
		for tool := range e.tools {
			if _, ok := counts[tool]; !ok {
				counts[tool] = 0
			}
			if !e.info.Draining {
				counts[tool]++
			}
		}
	}
	return counts
}
