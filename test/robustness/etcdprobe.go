package robustness

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Outage is a span in which etcd committed nothing the probe wrote.
type Outage struct {
	From, To time.Time
}

// etcdProbe measures when the etcd cluster could not commit. The bound on
// a call's end (its deadline plus the lease TTL) is a promise for one
// fault at a time; with quorum lost (two members down, or one restarted
// and not caught up when the next is killed) nothing is decided until it
// returns (docs/design.md §6). The checker extends a call's bound by the outages
// that overlap it, measured here rather than guessed from the faults.
type etcdProbe struct {
	mu      sync.Mutex
	outages []Outage
}

const (
	probeEvery = 100 * time.Millisecond
	// probeGap is the longest gap between two committed writes that is
	// not an outage: a few probes, as a leader election takes.
	probeGap = time.Second
)

// run writes one key every probeEvery until ctx ends, recording each gap
// between committed writes longer than probeGap.
func (p *etcdProbe) run(ctx context.Context, cli *clientv3.Client) {
	last := time.Now()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.gap(last, time.Now())
			return
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, probeGap)
		// Under the watched prefix (the collector ignores the key): the
		// watch then sees every revision, so "caught up" can be told.
		_, err := cli.Put(wctx, prefix+"robustness-probe", time.Now().Format(time.RFC3339Nano))
		cancel()
		if err == nil {
			now := time.Now()
			p.gap(last, now)
			last = now
		}
	}
}

func (p *etcdProbe) gap(from, to time.Time) {
	if to.Sub(from) <= probeGap {
		return
	}
	p.mu.Lock()
	p.outages = append(p.outages, Outage{From: from, To: to})
	p.mu.Unlock()
}

// Outages returns the outages seen so far, oldest first.
func (p *etcdProbe) Outages() []Outage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Outage(nil), p.outages...)
}
