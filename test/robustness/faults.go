package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"
)

// Fault kinds, as counted in the summary.
const (
	FKillWorker      = "kill_worker"
	FKillCoordinator = "kill_coordinator"
	FKillGateway     = "kill_gateway"
	FKillEtcd        = "kill_etcd"
	FKillEtcdLeader  = "kill_etcd_leader"
	FPauseWorker     = "pause_worker"
	FPauseCoord      = "pause_coordinator"
	FPartWorkerCoord = "partition_worker_coordinators"
	FPartGWWorker    = "partition_gateways_worker"
	FPartCoordEtcd   = "partition_coordinator_etcd"
	FDelayWorker     = "delay_worker_coordinators"
	FDropGWWorker    = "drop_gateways_worker"
)

var faultKinds = []string{FKillWorker, FKillCoordinator, FKillGateway, FKillEtcd, FKillEtcdLeader,
	FPauseWorker, FPauseCoord, FPartWorkerCoord, FPartGWWorker, FPartCoordEtcd, FDelayWorker, FDropGWWorker,
	FSilentWorker, FDrainWorker, FSlowReader, FLostCompleteReply}

// Injector applies one fault at a time, at random, and logs each.
type Injector struct {
	c   *Cluster
	wl  *Workload  // for the probes' clients and their records
	co  *collector // to find a probe's worker
	r   *rand.Rand
	log func(format string, args ...any)

	mu       sync.Mutex
	counts   map[string]int
	gens     []int // worker restarts per slot
	failures []error
	kills    []Kill // window.go

	up upgrader // upgrade.go; Run's goroutine alone uses it
}

func newInjector(c *Cluster, wl *Workload, co *collector, seed int64, up upgrader, log func(string, ...any)) *Injector {
	if len(up.roles) == 0 {
		up.roles = upgradeRoles
	}
	return &Injector{c: c, wl: wl, co: co, r: rand.New(rand.NewPCG(uint64(seed), 0xfa17)), log: log, counts: map[string]int{},
		gens: make([]int, len(c.workers)), up: up}
}

// Run injects faults every gap (jittered) until ctx ends; each fault is
// healed before the next starts.
func (in *Injector) Run(ctx context.Context, gap time.Duration) {
	for i, j := 0, 0; ctx.Err() == nil; i++ {
		pace(ctx, gap/2+time.Duration(in.r.Int64N(int64(gap))))
		if ctx.Err() != nil {
			return
		}
		// Every upgradeEvery-th an upgrade fault; of the others, every
		// kind once in turn first, then at random.
		kind := FUpgrade
		if !in.upgradeDue(i) {
			kind = faultKinds[j%len(faultKinds)]
			if j >= len(faultKinds) {
				kind = faultKinds[in.r.IntN(len(faultKinds))]
			}
			j++
		}
		if err := in.inject(context.WithoutCancel(ctx), kind); err != nil {
			in.mu.Lock()
			in.failures = append(in.failures, fmt.Errorf("%s: %w", kind, err))
			in.mu.Unlock()
		}
	}
}

// Counts returns the faults injected per kind.
func (in *Injector) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for k, v := range in.counts {
		out[k] = v
	}
	return out
}

// Failures lists faults whose recovery did not work (a component that
// would not come back).
func (in *Injector) Failures() []error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]error(nil), in.failures...)
}

func (in *Injector) inject(ctx context.Context, kind string) error {
	if kind == FUpgrade {
		return in.upgrade(ctx)
	}
	if ok, err := in.injectSilent(ctx, kind); ok {
		return err
	}
	if ok, err := in.injectWindow(ctx, kind); ok {
		return err
	}
	c, r := in.c, in.r
	ttl := c.opts.LeaseTTL
	beyondTTL := ttl*3/2 + time.Duration(r.Int64N(int64(ttl)))
	short := 300*time.Millisecond + time.Duration(r.Int64N(int64(1500*time.Millisecond)))
	var err error
	switch kind {
	case FKillWorker:
		w := r.IntN(len(c.workers))
		in.note(kind, "worker %d", w)
		in.killWorker(w)
		pace(ctx, short)
		err = in.restart(ctx, w)
	case FKillCoordinator:
		i := r.IntN(len(c.coords))
		in.note(kind, "coordinator %d", i)
		c.coords[i].kill()
		pace(ctx, short)
		if err = c.coords[i].start(); err == nil {
			err = c.waitCoordinator(ctx, i)
		}
	case FKillGateway:
		i := r.IntN(len(c.gateways))
		tp := in.aimTask(ctx, i) // taskprobe.go
		in.note(kind, "gateway %d%s", i, tp.describe())
		in.killGateway(i)
		tp.serve(ctx)
		pace(ctx, short)
		if err = c.gateways[i].start(); err == nil {
			err = c.waitGateway(ctx, i)
		}
		tp.wait()
	case FKillEtcd, FKillEtcdLeader:
		m := r.IntN(len(c.etcd))
		if kind == FKillEtcdLeader {
			if m, err = c.etcdLeader(ctx); err != nil {
				return err
			}
		}
		in.note(kind, "etcd member %d", m)
		c.etcd[m].kill()
		pace(ctx, short)
		if err = c.etcd[m].start(); err == nil {
			err = c.waitEtcdHealthy(ctx)
		}
	case FPauseWorker:
		w := r.IntN(len(c.workers))
		in.note(kind, "worker %d for %v", w, beyondTTL)
		in.pause(ctx, c.workers[w], beyondTTL)
	case FPauseCoord:
		i := r.IntN(len(c.coords))
		in.note(kind, "coordinator %d for %v", i, beyondTTL)
		in.pause(ctx, c.coords[i], beyondTTL)
		err = c.waitCoordinator(ctx, i)
	case FPartWorkerCoord:
		w := r.IntN(len(c.workers))
		in.note(kind, "worker %d for %v", w, beyondTTL)
		in.cut(ctx, c.workerCoord[w], modeBlackhole, 0, beyondTTL)
	case FDelayWorker:
		w := r.IntN(len(c.workers))
		in.note(kind, "worker %d, 80ms for %v", w, short)
		in.cut(ctx, c.workerCoord[w], modeDelay, 80*time.Millisecond, short)
	case FPartGWWorker, FDropGWWorker:
		w := r.IntN(len(c.workers))
		mode := modeBlackhole
		if kind == FDropGWWorker {
			mode = modeDrop
		}
		in.note(kind, "worker %d, %v for %v", w, mode, short)
		in.cut(ctx, []*Proxy{c.workerIn[w]}, mode, 0, short)
	case FPartCoordEtcd:
		i := r.IntN(len(c.coords))
		in.note(kind, "coordinator %d for %v", i, short)
		in.cut(ctx, c.coordEtcd[i], modeBlackhole, 0, short)
	}
	return err
}

func (in *Injector) note(kind, format string, args ...any) {
	in.mu.Lock()
	in.counts[kind]++
	in.mu.Unlock()
	in.log("fault %s: "+format, append([]any{kind}, args...)...)
}

func (in *Injector) pause(ctx context.Context, p *process, d time.Duration) {
	p.signal(syscall.SIGSTOP)
	pace(ctx, d)
	p.signal(syscall.SIGCONT)
}

func (in *Injector) cut(ctx context.Context, ps []*Proxy, m proxyMode, delay, d time.Duration) {
	for _, p := range ps {
		p.Set(m, delay)
	}
	pace(ctx, d)
	for _, p := range ps {
		p.Heal()
	}
}

// etcdLeader returns the index of the member that leads.
func (c *Cluster) etcdLeader(ctx context.Context) (int, error) {
	var leader uint64
	ids := map[uint64]int{}
	for i, a := range c.etcdClient {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Etcd.Status(ctx, "http://"+a)
		cancel()
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	i, ok := ids[leader]
	if !ok {
		return 0, fmt.Errorf("no etcd leader among %v", c.etcdClient)
	}
	return i, nil
}

// waitEtcdHealthy waits until every member answers and one leads. It
// starts again a member that gave up (etcdmember exits when its member is
// not ready in 2 minutes): a member left dead would let the next kill take
// quorum away.
func (c *Cluster) waitEtcdHealthy(ctx context.Context) error {
	return waitFor(ctx, 3*time.Minute, "etcd healthy", func() bool {
		for _, p := range c.etcd {
			if p.exited() {
				p.start()
			}
		}
		for _, a := range c.etcdClient {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Etcd.Status(ctx, "http://"+a)
			cancel()
			if err != nil || st.Leader == 0 || len(st.Errors) > 0 {
				return false
			}
		}
		return true
	})
}
