package gateway_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mcpcancel/mcpcancel/gateway"
)

// metric reads one sample from a gateway's registry; labels are name,
// value pairs.
func metric(t *testing.T, g *gateway.Gateway, name string, labels ...string) float64 {
	t.Helper()
	return gathered(t, g.Registry(), name, labels...)
}

// gathered reads one sample from reg.
func gathered(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, want []string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(want); i += 2 {
		if got[want[i]] != want[i+1] {
			return false
		}
	}
	return true
}

// After a scripted run of calls and cancels, the counters say exactly
// what happened.
func TestMetricsCountWhatHappened(t *testing.T) {
	st := newStack(t, stackOptions{})
	g := st.gateways[0]
	sid := openSession(t, st.urls[0])
	for i := range 3 {
		if r := <-startCall(t, st.urls[0], sid, 100+i, "echo", map[string]any{"text": "x"}, nil); !hasResponse(r.msgs) {
			t.Fatal("echo not answered")
		}
	}
	<-startCall(t, st.urls[0], sid, 200, "sleep", map[string]any{"seconds": -1}, nil) // a tool error
	done := startCall(t, st.urls[0], sid, 300, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	waitFor(t, "the sleep to run", func() bool { return metric(t, g, "mcpcancel_gateway_calls_in_flight") == 1 })
	post(t, st.urls[0], sid, cancelMsg(300, "stop")) // won
	<-done
	post(t, st.urls[0], sid, cancelMsg(100, "late"))                                             // lost to completion
	post(t, st.urls[0], sid, cancelMsg(999, "nothing"))                                          // unknown
	post(t, st.urls[0], sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}`) // invalid
	// Cancels of calls the gateway does not hold are looked up after
	// their POST is answered (one may wait for a record on its way).
	waitFor(t, "the lookups to be answered", func() bool {
		return metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "unknown") == 1 &&
			metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "lost_to_completion") == 1
	})
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"mcpcancel_gateway_calls_total", []string{"tool", "echo", "outcome", "completed"}, 3},
		{"mcpcancel_gateway_calls_total", []string{"tool", "sleep", "outcome", "tool_error"}, 1},
		{"mcpcancel_gateway_calls_total", []string{"tool", "sleep", "outcome", "cancelled"}, 1},
		{"mcpcancel_gateway_cancellations_total", []string{"result", "won"}, 1},
		{"mcpcancel_gateway_cancellations_total", []string{"result", "lost_to_completion"}, 1},
		{"mcpcancel_gateway_cancellations_total", []string{"result", "unknown"}, 1},
		{"mcpcancel_gateway_cancellations_total", []string{"result", "ignored_invalid"}, 1},
		{"mcpcancel_gateway_calls_in_flight", nil, 0},
	} {
		if got := metric(t, g, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	resp, err := http.Get(st.urls[0][:len(st.urls[0])-len("/mcp")] + "/metrics")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %v %v", resp, err)
	}
	resp.Body.Close()
}

// The worker's metrics count the cancelled call and its cancel-to-stop
// latency; /readyz follows the coordinator.
func TestWorkerMetricsAndReadiness(t *testing.T) {
	st := newStack(t, stackOptions{})
	base := st.urls[0][:len(st.urls[0])-len("/mcp")]
	// The coordinator says it serves once it has reached etcd, a moment
	// after it starts (seen failing under load, asked at once).
	waitFor(t, "/readyz to say ready with the coordinator up", func() bool {
		return getStatus(t, base+"/readyz") == http.StatusOK
	})
	sid := openSession(t, st.urls[0])
	done := startCall(t, st.urls[0], sid, 1, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	waitFor(t, "the sleep to run on the worker", func() bool {
		mfs, _ := st.w.Registry().Gather()
		for _, mf := range mfs {
			if mf.GetName() == "mcpcancel_worker_calls_in_flight" {
				return mf.GetMetric()[0].GetGauge().GetValue() == 1
			}
		}
		return false
	})
	post(t, st.urls[0], sid, cancelMsg(1, "stop"))
	<-done
	waitFor(t, "the worker to count it", func() bool {
		mfs, _ := st.w.Registry().Gather()
		for _, mf := range mfs {
			if mf.GetName() == "mcpcancel_worker_cancel_to_stop_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount() == 1
			}
		}
		return false
	})
	mfs, _ := st.w.Registry().Gather()
	for _, mf := range mfs {
		if mf.GetName() == "mcpcancel_worker_calls_total" {
			if m := mf.GetMetric(); len(m) != 1 || !hasLabels(m[0], []string{"tool", "sleep", "outcome", "cancelled"}) || m[0].GetCounter().GetValue() != 1 {
				t.Fatalf("worker calls = %v", m)
			}
		}
	}
	st.coord.Stop()
	if code := getStatus(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d with the coordinator down", code)
	}
	if code := getStatus(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A flood of cancels naming nothing costs no etcd write, is mostly turned
// away before the coordinator, and does not keep another session's
// cancel from winning.
func TestBogusCancelFlood(t *testing.T) {
	st := newStack(t, stackOptions{})
	g := st.gateways[0]
	victim, flooder := openSession(t, st.urls[0]), openSession(t, st.urls[0])
	done := startCall(t, st.urls[0], victim, 1, "sleep", map[string]any{"seconds": 30, "steps": 300}, nil)
	// Wait for Begin to have committed, not merely for the call to run
	// (it runs beside its Begin), or its write lands inside the window.
	waitRecorded(t, st.c, "session:"+victim, 1)
	before := st.revision(t)
	const flood = 1000
	for i := range flood {
		post(t, st.urls[0], flooder, cancelMsg(10000+i, "bogus"))
	}
	var limited, unknown float64
	waitFor(t, "every lookup to be answered", func() bool {
		limited = metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "ignored_rate_limited")
		unknown = metric(t, g, "mcpcancel_gateway_cancellations_total", "result", "unknown")
		return limited+unknown >= flood
	})
	if keys := st.callWrites(t, before, st.revision(t)); len(keys) > 0 {
		t.Fatalf("the flood wrote to etcd: %v", keys)
	}
	if limited+unknown != flood || limited < flood/2 {
		t.Fatalf("%v rate limited and %v looked up of %d", limited, unknown, flood)
	}
	post(t, st.urls[0], victim, cancelMsg(1, "real"))
	if r := <-done; hasResponse(r.msgs) {
		t.Fatal("the victim's cancel did not win")
	}
	if as := st.audits(t, "session:"+victim)["1"]; len(as) != 1 || as[0].Outcome != "cancelled" {
		t.Fatalf("victim audit = %+v", as)
	}
}
