package upstream_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// BenchmarkUpstreamSessions measures what per-client upstream sessions
// cost against one shared connection: N 2025-era clients of the gateway
// call server-everything's echo concurrently, over stdio and HTTP. It
// reports calls/s, the upstream processes running and their resident
// memory (stdio), and the upstream sessions open.
//
//	go test -run '^$' -bench BenchmarkUpstreamSessions -benchtime 200x ./worker/upstream
func BenchmarkUpstreamSessions(b *testing.B) {
	for _, transport := range []string{"stdio", "http"} {
		for _, mode := range []upstream.SessionMode{upstream.Shared, upstream.PerClient} {
			for _, n := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("%s/%s/clients=%d", transport, mode, n), func(b *testing.B) {
					benchSessions(b, transport, mode, n)
				})
			}
		}
	}
}

func benchSessions(b *testing.B, transport string, mode upstream.SessionMode, n int) {
	opts := upstream.Options{Sessions: mode, MaxSessions: n}
	if transport == "stdio" {
		opts.Command = []string{"node", everything(b), "stdio"}
	} else {
		opts.URL = httpEverything(b)
	}
	st := startStack(b, opts, "echo")
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = st.connect(b)
		clients[i].text(b, "echo", map[string]any{"message": "warm"}) // dials its upstream session
	}
	b.ResetTimer()
	start := time.Now()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if got := c.text(b, "echo", map[string]any{"message": "x"}); got != "Echo: x" {
					b.Errorf("echo: %q", got)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
	b.ReportMetric(float64(st.adapter.UpstreamSessions()), "sessions")
	if transport == "stdio" {
		pids := append(st.adapter.SessionPIDs(), st.adapter.PID())
		b.ReportMetric(float64(len(pids)), "procs")
		b.ReportMetric(rssMiB(pids), "RSS-MiB")
	}
}

// rssMiB sums the resident memory of pids, from /proc.
func rssMiB(pids []int) float64 {
	var kb int
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				kb += n
			}
		}
	}
	return float64(kb) / 1024
}
