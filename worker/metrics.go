package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker runtime's Prometheus metrics.
type metrics struct {
	reg        *prometheus.Registry
	calls      *prometheus.CounterVec
	cancelStop prometheus.Histogram
	orphanRuns prometheus.Counter
}

func newMetrics(w *Worker) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpcancel_worker_calls_total",
			Help: "Calls this worker ran, by tool and outcome (completed, tool_error, failed, cancelled, lost).",
		}, []string{"tool", "outcome"}),
		cancelStop: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mcpcancel_worker_cancel_to_stop_seconds",
			Help:    "From a call's context being cancelled to its handler returning.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs .. 26s
		}),
		orphanRuns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpcancel_worker_orphan_task_runs_total",
			Help: "Task runs this worker started itself because no gateway opened them in time (its creating gateway was lost).",
		}),
	}
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mcpcancel_worker_calls_in_flight",
		Help: "Calls on this worker, from their Execute until they end: handler returned and outcome settled.",
	}, func() float64 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return float64(len(w.calls))
	})
	handlers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mcpcancel_worker_running_handlers",
		Help: "Handlers running on this worker: calls whose handler has not returned.",
	}, func() float64 { return float64(w.handlers.Load()) })
	m.reg.MustRegister(m.calls, m.cancelStop, m.orphanRuns, inflight, handlers,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Registry is the worker's metrics registry; serve it on an admin port.
func (w *Worker) Registry() *prometheus.Registry { return w.metrics.reg }

// stopped observes one cancelled call. When the handler noticed before
// the worker saw the context end, the latency counts as zero.
func (m *metrics) stopped(cancelledAt, returnedAt time.Time) {
	m.cancelStop.Observe(max(0, returnedAt.Sub(cancelledAt)).Seconds())
}
