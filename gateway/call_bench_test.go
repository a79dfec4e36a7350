package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// Run: go test ./gateway -run '^$' -bench StdioCall -count 6
// (with -cpuprofile to see where a call's CPU goes; every component runs
// in the one process).
//
// BenchmarkStdioCall times a tools/call of echo through the whole system
// (stdio client, gateway, coordinator, embedded etcd without fsync, worker),
// so that it measures the components' own work per call rather than the
// disk: seq is one call at a time on one connection, par16 sixteen
// connections calling at once, as the bench's throughput run does.
// cpu-µs/op is the process's CPU time (user and system) per call: par16
// is not CPU-bound on 2 cores, so a saving shows there and not in sec/op.
func BenchmarkStdioCall(b *testing.B) {
	cl := etcdtest.Single(b)
	coord := testcluster.StartCoordinator(b, cl.Client(), coordinator.Options{})
	testcluster.StartWorker(b, worker.Options{Coordinator: coord.Addr, Name: "bench"}, demo.Register)
	g, _ := testcluster.StartGateway(b, coord.Conn(b), gateway.Options{})
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a short line of text to echo back"},"_meta":{"progressToken":%d}}}`
	b.Run("seq", func(b *testing.B) { benchSeq(b, openBenchConn(b, g), call) })
	// A 2026-07-28 call carries its version and client capabilities in
	// every request's _meta: the path that reads its params most.
	call2026 := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a short line of text to echo back"},"_meta":{"progressToken":%d,` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{"form":{}}}}}}`
	b.Run("seq2026", func(b *testing.B) { benchSeq(b, openBenchConnAs(b, g, false), call2026) })
	b.Run("par16", func(b *testing.B) {
		conns := make([]*benchConn, 16)
		for i := range conns {
			conns[i] = openBenchConn(b, g)
		}
		var next, ids atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8) // 16 goroutines on 2 cores
		b.ResetTimer()
		cpu := startCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			c := conns[int(next.Add(1)-1)%len(conns)]
			for pb.Next() {
				id := ids.Add(1)
				c.roundTrip(b, fmt.Sprintf(call, id, id))
			}
		})
		cpu.report(b)
	})
}

// benchSeq makes calls one at a time on c, each call formatted from
// format with its id and progress token.
func benchSeq(b *testing.B, c *benchConn, format string) {
	b.ReportAllocs()
	cpu := startCPU(b)
	i := 0
	for b.Loop() {
		i++
		c.roundTrip(b, fmt.Sprintf(format, i, i))
	}
	cpu.report(b)
}

// cpuMark is the process's CPU time when a benchmark's loop started.
type cpuMark time.Duration

func startCPU(b *testing.B) cpuMark { return cpuMark(processCPU(b)) }

// report adds the CPU time per iteration since the mark, in µs.
func (m cpuMark) report(b *testing.B) {
	used := processCPU(b) - time.Duration(m)
	b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the user and system time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchConn is one stdio connection whose client sends a request and
// reads lines until its response (skipping the gateway's pings and the
// call's notifications).
type benchConn struct {
	mu  sync.Mutex // one round trip at a time
	in  io.Writer
	out *bufio.Reader
}

func openBenchConn(b *testing.B, g *gateway.Gateway) *benchConn { return openBenchConnAs(b, g, true) }

// openBenchConnAs opens a stdio connection, initialized (2025) or not
// (2026-07-28).
func openBenchConnAs(b *testing.B, g *gateway.Gateway, initialize bool) *benchConn {
	b.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan struct{})
	go func() { // owned: ends when inW is closed at cleanup
		defer close(served)
		g.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	b.Cleanup(func() {
		inW.Close()
		go io.Copy(io.Discard, outR) // owned: ends when ServeStdio closes outW
		<-served
	})
	c := &benchConn{in: inW, out: bufio.NewReaderSize(outR, 64<<10)}
	if !initialize {
		return c // 2026-07-28: no initialize; every request says its version
	}
	c.roundTrip(b, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
	if _, err := io.WriteString(c.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		b.Fatal(err)
	}
	return c
}

func (c *benchConn) roundTrip(b *testing.B, req string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := io.WriteString(c.in, req+"\n"); err != nil {
		b.Fatal(err)
	}
	for {
		line, err := c.out.ReadSlice('\n')
		if err != nil {
			b.Fatalf("reading the response: %v", err)
		}
		if bytes.Contains(line, []byte(`"result"`)) || bytes.Contains(line, []byte(`"error"`)) {
			if bytes.Contains(line, []byte(`"isError":true`)) || bytes.Contains(line, []byte(`"error":{`)) {
				b.Fatalf("call failed: %s", line)
			}
			return
		}
	}
}
