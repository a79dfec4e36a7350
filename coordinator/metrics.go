package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// metrics are the coordinator's Prometheus metrics.
type metrics struct {
	reg          *prometheus.Registry
	decisions    *prometheus.CounterVec
	tasksCreated prometheus.Counter
	cancels      *prometheus.CounterVec
	// Completions sent on workers' control streams (CompleteCall), which
	// gRPC's per-method metrics do not see.
	streamCompletes prometheus.Counter
	createdSettled  prometheus.Counter
	starts          *prometheus.CounterVec
	// From a decision (settled_at) to the handler's reported return
	// (stopped_at), as the audit records them.
	stopLatency *prometheus.HistogramVec
	// Each Txn the group committer sends to etcd, a batch or alone.
	commitDuration prometheus.Histogram
	janitorLeader  prometheus.Gauge
	janitorErrors  prometheus.Counter
	// Running calls a lease TTL past their deadline in the janitor's
	// latest round; only the leading replica reports them.
	overdue prometheus.Gauge
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpcancel_coordinator_decisions_total",
			Help: "Audited decisions this replica wrote, by outcome (completed, cancelled, failed, cancel_lost) and initiator (client, timeout, disconnect, shutdown, operator, worker_lost, tool; none for a completion).",
		}, []string{"outcome", "initiator"}),
		tasksCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpcancel_coordinator_tasks_created_total",
			Help: "MCP tasks this replica created.",
		}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpcancel_coordinator_cancellations_total",
			Help: "Cancel requests this replica answered, by result (cancelled, already_completed, already_failed, already_cancelled, unknown).",
		}, []string{"result"}),
		streamCompletes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpcancel_coordinator_stream_completions_total",
			Help: "Completions workers sent on their control streams rather than as Complete RPCs.",
		}),
		createdSettled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpcancel_coordinator_created_settled_total",
			Help: "Decisions that created their call's record, already settled, before the call's Begin (a call begun beside its work).",
		}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpcancel_coordinator_starts_total",
			Help: "Calls placed by Start, by mode: beside (executed while the record is written) or begin_first (a worker or tool that needs the record first).",
		}, []string{"mode"}),
	}
	m.addOps()
	workers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mcpcancel_coordinator_workers",
		Help: "Live workers, as this replica sees them.",
	}, func() float64 {
		s.view.mu.Lock()
		defer s.view.mu.Unlock()
		return float64(len(s.view.workers))
	})
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mcpcancel_coordinator_running_handlers",
		Help: "Calls whose handlers have not yet returned, across all workers.",
	}, func() float64 {
		s.view.mu.Lock()
		defer s.view.mu.Unlock()
		return float64(len(s.view.owners))
	})
	m.reg.MustRegister(m.decisions, m.tasksCreated, m.cancels, m.streamCompletes, m.createdSettled, m.starts, workers, running,
		m.stopLatency, m.commitDuration, m.janitorLeader, m.janitorErrors, m.overdue, newToolWorkers(s.view),
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Registry is the replica's metrics registry; serve it on an admin port.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// cancelResultNames label Cancel's answers in metrics.
var cancelResultNames = map[pb.CancelResult]string{
	pb.CancelResult_CANCEL_RESULT_CANCELLED:         "cancelled",
	pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED: "already_completed",
	pb.CancelResult_CANCEL_RESULT_ALREADY_FAILED:    "already_failed",
	pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED: "already_cancelled",
	pb.CancelResult_CANCEL_RESULT_UNKNOWN:           "unknown",
}

// decided counts n decisions of one outcome by one initiator ("" for
// none: a completion).
func (m *metrics) decided(outcome, initiator string, n int) {
	if initiator == "" {
		initiator = "none"
	}
	m.decisions.WithLabelValues(outcome, initiator).Add(float64(n))
}
