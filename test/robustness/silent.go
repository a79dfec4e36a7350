package robustness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fault kinds of peers that go silent, slow or half-done (issue 14). Each
// aims at a probe call of its own, with the fault's bounds on it, besides
// whatever the workload has in flight.
const (
	FSilentWorker      = "silent_worker"       // every link of the probe's worker goes silent
	FDrainWorker       = "drain_worker"        // the probe's worker is stopped with SIGTERM and a 1 s drain
	FSlowReader        = "slow_reader"         // the probe's client stops reading, then cancels
	FLostCompleteReply = "lost_complete_reply" // the probe's worker loses the coordinators' replies as it completes
)

// drainTimeout is the workers' --drain-timeout.
const drainTimeout = time.Second

// probeSeconds is how long a probe's sleep runs: within the deadline the
// coordinators allow (half the 10 s retention), so that the deadline
// decides nothing a fault should.
const probeSeconds = 4.5

// injectSilent runs one of the kinds above; false if kind is not one.
func (in *Injector) injectSilent(ctx context.Context, kind string) (bool, error) {
	var err error
	switch kind {
	case FSilentWorker:
		err = in.silentWorker(ctx)
	case FDrainWorker:
		err = in.drainWorker(ctx)
	case FSlowReader:
		err = in.slowReader(ctx)
	case FLostCompleteReply:
		err = in.lostCompleteReply(ctx)
	default:
		return false, nil
	}
	return true, err
}

// silentWorker: the probe's worker is cut off both ways, from the gateways
// and the coordinators, with no FIN or RST. Its connections stay silent
// for good; the proxies take new ones again after twice the lease TTL. The
// call must be FAILED (worker_lost) and its client answered with an error
// within the lease TTL plus 10 s.
func (in *Injector) silentWorker(ctx context.Context) error {
	p, w, err := in.aim(ctx, FSilentWorker, probeSeconds, 9)
	if err != nil {
		return err
	}
	ttl := in.c.opts.LeaseTTL
	in.note(FSilentWorker, "worker %d (%s), new connections silent for %v", w, in.c.name(w), 2*ttl)
	now := time.Now()
	p.mark(func(c *ClientCall) { c.AnswerBy = now.Add(ttl + answerBound) })
	in.cut(ctx, append([]*Proxy{in.c.workerIn[w]}, in.c.workerCoord[w]...), modeSilent, 0, 2*ttl)
	p.wait()
	return nil
}

// drainWorker: the probe's worker gets SIGTERM with a call in flight for
// 3.5 s more; after its 1 s drain the client must have an error within a
// few seconds. The slot is then started again.
func (in *Injector) drainWorker(ctx context.Context) error {
	p, w, err := in.aim(ctx, FDrainWorker, probeSeconds, 9)
	if err != nil {
		return err
	}
	in.note(FDrainWorker, "worker %d (%s), drain %v", w, in.c.name(w), drainTimeout)
	now := time.Now()
	p.mark(func(c *ClientCall) { c.AnswerBy = now.Add(drainTimeout + 5*time.Second) })
	in.c.workers[w].stop(drainTimeout + 10*time.Second)
	p.wait()
	return in.restart(ctx, w)
}

// slowReader: the probe's client stops reading its event stream while the
// call sends progress fast; 2 s later it cancels (on its own POST). The
// cancel must be decided within 3 s of being sent, whatever the stalled
// stream does. 1 s later its gateway gets SIGTERM: with the client still
// stalled, it must exit within its 1 s shutdown grace plus 5 s (else the
// fault does not recover), and is started again; the client reads again
// once it is gone.
func (in *Injector) slowReader(ctx context.Context) error {
	p, err := in.startProbe(ctx, FSlowReader, probeSeconds, 2250, true)
	if err != nil {
		return err
	}
	if err := p.progressed(ctx, 1); err != nil {
		p.cancel()
		p.wait()
		return err
	}
	in.note(FSlowReader, "gateway %d: stalled, cancelled after 2s, gateway stopped 1s later", p.gw)
	stalled := time.Now()
	p.stall.stop()
	pace(ctx, 2*time.Second)
	now := time.Now()
	p.mark(func(c *ClientCall) { c.CancelSent, c.DecideBy = now, now.Add(3*time.Second) })
	in.wl.cancels.Add(1)
	p.cancel()
	pace(ctx, time.Second)
	began := time.Now()
	in.c.gateways[p.gw].stop(20 * time.Second)
	took := time.Since(began)
	p.stall.resume()
	p.wait()
	p.stall.base.CloseIdleConnections()
	err = in.c.gateways[p.gw].start()
	if err == nil {
		err = in.c.waitGateway(ctx, p.gw)
	}
	if limit := time.Second + 5*time.Second; err == nil && took > limit {
		err = fmt.Errorf("gateway %d took %v to stop with a stalled client (limit %v)", p.gw, took.Round(time.Millisecond), limit)
	}
	// What the client read after it stalled, it read late: when it arrived
	// is not known, so it is not held against the progress rules.
	p.mark(func(c *ClientCall) {
		kept := c.Progress[:0]
		for _, t := range c.Progress {
			if t.Before(stalled) {
				kept = append(kept, t)
			}
		}
		c.Progress = kept
	})
	return err
}

// lostCompleteReply: as the probe's call completes, everything the
// coordinators send its worker is lost for 3 s (new connections too), so
// the Complete commits and its reply never arrives. The client must get
// the result: a retried Complete that already won is recognised as won.
func (in *Injector) lostCompleteReply(ctx context.Context) error {
	p, w, err := in.aim(ctx, FLostCompleteReply, 1.5, 3)
	if err != nil {
		return err
	}
	if err := p.progressed(ctx, 2); err != nil {
		p.wait()
		return err
	}
	ttl := in.c.opts.LeaseTTL
	in.note(FLostCompleteReply, "worker %d (%s), replies lost for 3s", w, in.c.name(w))
	now := time.Now()
	p.mark(func(c *ClientCall) { c.WantResult, c.AnswerBy = true, now.Add(ttl+answerBound) })
	in.cut(ctx, in.c.workerCoord[w], modeSilentReplies, 0, 3*time.Second)
	p.wait()
	return nil
}

// aim starts a probe, waits for its first progress (so no retry can hide
// the fault) and for its call record, and returns its worker's slot. A
// probe whose call ends first is replaced, up to three times.
func (in *Injector) aim(ctx context.Context, kind string, seconds float64, steps int) (*probe, int, error) {
	for try := 1; ; try++ {
		p, w, err := in.aimOnce(ctx, kind, seconds, steps)
		if !errors.Is(err, errProbeEnded) || try == 3 {
			return p, w, err
		}
		in.log("fault %s: probe %d ended before the fault could be aimed (%v); another", kind, try, err)
	}
}

func (in *Injector) aimOnce(ctx context.Context, kind string, seconds float64, steps int) (*probe, int, error) {
	p, err := in.startProbe(ctx, kind, seconds, steps, false)
	if err != nil {
		return nil, 0, err
	}
	w, err := p.worker(ctx)
	if err == nil || p.ended() {
		err = p.progressed(ctx, 1)
	}
	if err != nil {
		p.cancel()
		p.wait()
		return nil, 0, err
	}
	return p, w, nil
}

// restart starts worker slot w again under a new name.
func (in *Injector) restart(ctx context.Context, w int) error {
	in.mu.Lock()
	in.gens[w]++
	gen := in.gens[w]
	in.mu.Unlock()
	return in.c.restartWorker(ctx, w, gen)
}

// name is worker slot w's current name.
func (c *Cluster) name(w int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workerName[w]
}
