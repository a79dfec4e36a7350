package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
)

// onSignals returns a context that the first stop signal ends, so
// the command stops gracefully, saying what the stop waits for (see
// shutdownOf); a second one runs the command's exit cleanups and calls
// exit(130) at once. stop releases the signals and waits for the watcher
// it started.
func onSignals(parent context.Context, stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	sd, stops := &shutdown{}, stopSignals()
	ctx, stopNotify := signal.NotifyContext(context.WithValue(parent, shutdownKey{}, sd), stops...)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stops...)
	done, watched := make(chan struct{}), make(chan struct{})
	go func() { // owned by stop, which waits for it
		defer close(watched)
		sd.countSignals(sigs, done, stderr, exit)
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		<-watched
		stopNotify()
	}
}

// stopSignals are the signals that stop a command: SIGINT, SIGTERM, and
// SIGHUP (its terminal closed) unless it was started ignoring SIGHUP
// (nohup), which must go on ignoring it.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// shutdown is what a running command tells the signal watcher: what its
// graceful stop waits for, said on the first signal, and what must be
// cleaned up before a second signal exits at once.
type shutdown struct {
	mu      sync.Mutex
	waits   func() string // guarded by mu
	cleanup []func()      // guarded by mu
}

type shutdownKey struct{}

// shutdownOf is the shutdown of the command ctx runs, or nil outside
// Main; its methods do nothing on nil.
func shutdownOf(ctx context.Context) *shutdown {
	sd, _ := ctx.Value(shutdownKey{}).(*shutdown)
	return sd
}

// waitsFor sets what the first signal says the stop waits for: f returns
// a phrase to follow "shutting down" (see callsInFlight), or "" for nothing.
func (sd *shutdown) waitsFor(f func() string) {
	if sd == nil {
		return
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	sd.waits = f
}

// onExit adds f to what a second signal runs before it exits: cleanup
// that the graceful stop would have done, such as removing temporary data.
func (sd *shutdown) onExit(f func()) {
	if sd == nil {
		return
	}
	sd.mu.Lock()
	defer sd.mu.Unlock()
	sd.cleanup = append(sd.cleanup, f)
}

// firstNote is what the first signal says.
func (sd *shutdown) firstNote(sig os.Signal) string {
	sd.mu.Lock()
	waits := sd.waits
	sd.mu.Unlock()
	what := ""
	if waits != nil {
		if w := waits(); w != "" {
			what = " " + w
		}
	}
	return fmt.Sprintf("mcpcancel: %v: shutting down%s; signal again to exit at once\n", sig, what)
}

// exitNow runs the exit cleanups, last added first.
func (sd *shutdown) exitNow() {
	sd.mu.Lock()
	fs := sd.cleanup
	sd.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// countSignals tells the user what the first signal does and exits on
// the second.
func (sd *shutdown) countSignals(sigs <-chan os.Signal, done <-chan struct{}, stderr io.Writer, exit func(int)) {
	for n := 1; ; n++ {
		select {
		case <-done:
			return
		case sig := <-sigs:
			if n == 1 {
				fmt.Fprint(stderr, sd.firstNote(sig))
				continue
			}
			fmt.Fprintf(stderr, "mcpcancel: %v again: exiting at once\n", sig)
			sd.exitNow()
			exit(cmdline.ExitInterrupted)
			return
		}
	}
}

// callsInFlight phrases what a stop waits for: up to grace for the calls in
// flight on reg's gauge, named metric, or nothing when none are.
func callsInFlight(reg prometheus.Gatherer, metric string, grace time.Duration) string {
	switch n := gauge(reg, metric); n {
	case 0:
		return "(no calls in flight)"
	case 1:
		return fmt.Sprintf("and waiting up to %v for 1 call in flight to finish, then cancelling it", grace)
	default:
		return fmt.Sprintf("and waiting up to %v for %d calls in flight to finish, then cancelling them", grace, n)
	}
}

// gauge is the value of the gauge named metric in reg, 0 if it has none.
func gauge(reg prometheus.Gatherer, metric string) int {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue()
		}
		return int(sum)
	}
	return 0
}

// The gauges of calls in flight that a stop waits for.
const (
	gatewayInFlight = "mcpcancel_gateway_calls_in_flight"
	workerInFlight  = "mcpcancel_worker_calls_in_flight"
)
