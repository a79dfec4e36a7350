package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Call outcomes as counted.
const (
	outcomeCompleted = "completed"
	outcomeToolError = "tool_error"
	outcomeCancelled = "cancelled"
	outcomeTimeout   = "timeout"
	outcomeFailed    = "failed"
	outcomeRejected  = "rejected"
)

// Cancellation results as counted.
const (
	cancelWon            = "won"
	cancelLost           = "lost_to_completion"
	cancelUnknown        = "unknown"
	cancelWrongDirection = "ignored_wrong_direction"
	cancelInvalid        = "ignored_invalid"
	cancelRateLimited    = "ignored_rate_limited"
)

// metrics are the gateway's Prometheus metrics.
type metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	cancels  *prometheus.CounterVec
	retries  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight prometheus.GaugeFunc
	sessions prometheus.GaugeFunc
}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpcancel_gateway_calls_total",
			Help: "tools/call requests that ended, by tool and outcome (completed, tool_error, cancelled, timeout, failed, rejected).",
		}, []string{"tool", "outcome"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpcancel_gateway_cancellations_total",
			Help: "Cancellations received, by result (won, lost_to_completion, unknown, ignored_wrong_direction, ignored_invalid, ignored_rate_limited).",
		}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpcancel_gateway_retries_total",
			Help: "Calls of idempotent tools placed once more, on another worker, after their worker was lost, by tool.",
		}, []string{"tool"}),
		// The MCP semantic conventions' mcp.server.operation.duration, in
		// Prometheus spelling, with their recommended buckets.
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcp_server_operation_duration_seconds",
			Help:    "MCP requests served, from arrival to answer (or to a cancel that won), by mcp.method.name and error.type (empty when it succeeded).",
			Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"mcp_method_name", "error_type"}),
		inflight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpcancel_gateway_calls_in_flight",
			Help: "tools/call requests in flight on this gateway.",
		}, func() float64 { return float64(g.inflight.Load()) }),
		sessions: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpcancel_gateway_listening_sessions",
			Help: "Sessions that can hear server notifications (stdio, 2025 GET streams, 2026 listen streams).",
		}, func() float64 {
			g.mu.Lock()
			defer g.mu.Unlock()
			return float64(len(g.sessions))
		}),
	}
	for _, r := range []string{cancelWon, cancelLost, cancelUnknown, cancelWrongDirection, cancelInvalid, cancelRateLimited} {
		m.cancels.WithLabelValues(r)
	}
	m.reg.MustRegister(m.calls, m.cancels, m.retries, m.duration, m.inflight, m.sessions,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) call(tool, outcome string) { m.calls.WithLabelValues(tool, outcome).Inc() }

func (m *metrics) cancel(result string) { m.cancels.WithLabelValues(result).Inc() }

// operation records one MCP request's duration (gateway/trace.go).
func (m *metrics) operation(method, errType string, d time.Duration) {
	m.duration.WithLabelValues(method, errType).Observe(d.Seconds())
}

func (m *metrics) retry(tool string) { m.retries.WithLabelValues(tool).Inc() }

// Registry is the gateway's metrics registry, served at /metrics.
func (g *Gateway) Registry() *prometheus.Registry { return g.metrics.reg }

func (g *Gateway) metricsHandler() http.Handler {
	return promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{})
}
