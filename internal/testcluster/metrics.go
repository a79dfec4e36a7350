package testcluster

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HandledRPCs are the RPCs reg's gRPC server metrics count as answered,
// by method name (grpc_server_handled_total's grpc_method).
func HandledRPCs(tb testing.TB, reg prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// Counter is the value of the unlabelled counter name in reg; 0 before
// it counted anything.
func Counter(tb testing.TB, reg prometheus.Gatherer, name string) float64 {
	tb.Helper()
	if m := metric(tb, reg, name); m != nil {
		return m.GetCounter().GetValue()
	}
	return 0
}

// Gauge is the value of the unlabelled gauge name in reg; 0 if unset.
func Gauge(tb testing.TB, reg prometheus.Gatherer, name string) float64 {
	tb.Helper()
	if m := metric(tb, reg, name); m != nil {
		return m.GetGauge().GetValue()
	}
	return 0
}

func metric(tb testing.TB, reg prometheus.Gatherer, name string) *dto.Metric {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0]
		}
	}
	return nil
}
