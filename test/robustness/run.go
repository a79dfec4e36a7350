package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// RunOptions sizes one robustness run.
type RunOptions struct {
	Seed      int64  // the workload's
	FaultSeed int64  // the fault schedule's
	Bin       string // mcpcancel
	// OldBin is the last release's mcpcancel, OldRelease its version, for
	// the upgrade fault (upgrade.go); empty: no upgrade faults.
	OldBin, OldRelease string
	// UpgradeRoles are the roles the upgrade fault rolls back, in turn
	// (RoleWorker, ...); nil: every role.
	UpgradeRoles []string
	EtcdBin      string // etcdmember
	NodeDir      string // test/clients with node_modules; empty: Go clients only
	Dir          string
	Duration     time.Duration // least workload time
	MaxTime      time.Duration // most workload time while the targets are unmet
	// The run stops at Duration once every target is met.
	MinCalls, MinCancels, MinFaults int
	FaultGap                        time.Duration
	GoHTTP, GoStdio, TS             int // concurrent client loops
	// LatePlacement lets the operator decide a call by placement past
	// the call's deadline (operator_start.go).
	LatePlacement bool
	Tasks         int // concurrent task client loops (tasks.go)
	Log           func(format string, args ...any)
}

// Summary is what a run reports (and -json writes).
type Summary struct {
	Calls          int            `json:"calls"`
	Cancels        int            `json:"cancels"`
	Completed      int            `json:"completed"`
	Cancelled      int            `json:"cancelled"`
	Failed         int            `json:"failed"`
	Refused        int            `json:"refused"`
	Retried        int            `json:"retried"` // calls lost with their worker and placed again
	FaultsInjected int            `json:"faults_injected"`
	FaultKinds     map[string]int `json:"fault_kinds"`
	Violations     int            `json:"violations"`
	Seed           int64          `json:"seed"`
	FaultSeed      int64          `json:"fault_seed"`
	ByClient       map[string]int `json:"by_client"`
	WorkloadTime   string         `json:"workload_time"`
	// EtcdOutage is how long, in all, etcd committed nothing (etcdprobe.go).
	EtcdOutage string `json:"etcd_outage"`
	// SeenWithoutRecord counts the calls a client saw something of that
	// etcd never held (norecord.go), Excused those of them whose gateway
	// and a worker were both killed in the call's window.
	SeenWithoutRecord int `json:"seen_without_record"`
	Excused           int `json:"seen_without_record_excused"`
	// Linearizability is the model check of the operator's history.
	Linearizability linSummary  `json:"linearizability"`
	Tasks           taskSummary `json:"tasks"`
	// Releases counts the upgrade faults and the calls settled across
	// releases; absent when the last release could not be built.
	Releases *mixedSummary `json:"releases,omitempty"`
}

type linSummary struct {
	Operations int    `json:"operations"`
	Partitions int    `json:"partitions"`
	Unknown    int    `json:"unknown_outcomes"`
	CheckTime  string `json:"check_time"`
	Result     string `json:"result"`
	// Starts are the operator's Starts, StartsSettled those whose Begin
	// found a decision had created the record, ByPlacement its decisions
	// by placement.
	Starts        int `json:"starts"`
	StartsSettled int `json:"starts_settled"`
	ByPlacement   int `json:"decisions_by_placement"`
}

const (
	leaseTTL    = 2 * time.Second
	retention   = 10 * time.Second
	callTimeout = 15 * time.Second

	// handlersBound is how long after every call is decided a worker may
	// still count calls in flight: this tree's worker ends a call its
	// gateway stopped 200 ms after the Execute stream ends at the latest.
	handlersBound = 10 * time.Second
	// oldHandlersBound is that bound for a worker of the last release. A
	// v0.1.0 worker that loses its lease while a call its gateway stopped
	// (CallersGone, now sent for every client cancel) awaits its decision
	// keeps waiting until the gateway's decide_by, twice the gateway's
	// 10 s cancel timeout: its own order does not end the wait (this tree's
	// does, 8b4da30). The janitor's decision sends no stop order, so the
	// call is held, its handler long returned, for up to 20 s.
	oldHandlersBound = 25 * time.Second
)

// Run starts a cluster, runs the workload under faults, settles, and
// checks. It returns the summary, the violations and any harness error.
func Run(ctx context.Context, o RunOptions) (*Summary, []Violation, error) {
	c, err := StartCluster(ctx, ClusterOptions{Bin: o.Bin, EtcdBin: o.EtcdBin, OldBin: o.OldBin, Dir: o.Dir,
		LeaseTTL: leaseTTL, Retention: retention, CallTimeout: callTimeout, Tokens: 200000})
	if c != nil {
		defer c.Close()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start cluster: %w", err)
	}
	o.Log("cluster up; seed %d", o.Seed)
	if o.OldBin != "" {
		o.Log("upgrade faults between this tree and %s (%s)", o.OldRelease, o.OldBin)
	}

	var co collector
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() { watchDone <- co.run(watchCtx, c.Etcd) }()
	defer func() { stopWatch(); <-watchDone }()
	var probe etcdProbe
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); probe.run(probeCtx, c.Etcd) }()
	defer func() { stopProbe(); <-probeDone }()

	wl := &Workload{c: c, seed: o.Seed, nodeDir: o.NodeDir, tokens: 200000,
		http: &http.Transport{MaxIdleConnsPerHost: 64}, taskLoops: o.Tasks}
	defer wl.http.CloseIdleConnections()
	op, err := newOperator(c, o.LatePlacement)
	if err != nil {
		return nil, nil, err
	}
	defer op.close()
	in := newInjector(c, wl, &co, o.FaultSeed, upgrader{release: o.OldRelease, roles: o.UpgradeRoles}, o.Log)

	start := time.Now()
	wctx, stopWorkload := context.WithCancel(ctx)
	fctx, stopFaults := context.WithCancel(ctx)
	wdone, fdone, odone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { defer close(wdone); wl.Run(wctx, o.GoHTTP, o.GoStdio, o.TS) }()
	go func() { defer close(odone); op.run(wctx, o.Seed) }()
	go func() { defer close(fdone); in.Run(fctx, o.FaultGap) }()
	waitFor(ctx, o.MaxTime, "workload targets", func() bool {
		if time.Since(start) < o.Duration {
			return false
		}
		calls, cancels := wl.counts()
		return calls >= o.MinCalls && cancels >= o.MinCancels && total(in.Counts()) >= o.MinFaults
	})
	stopFaults()
	<-fdone
	stopWorkload()
	<-wdone
	<-odone
	elapsed := time.Since(start)
	c.HealAll()
	op.finish(ctx)
	o.Log("workload stopped after %v; settling", elapsed.Round(time.Second))
	for _, err := range in.Failures() {
		o.Log("fault recovery: %v", err)
	}

	h, err := settle(ctx, c, &co, wl)
	if err != nil {
		return nil, nil, err
	}
	stopProbe()
	<-probeDone
	h.EtcdOutages = probe.Outages()
	h.Kills = in.Kills()
	for _, out := range h.EtcdOutages {
		o.Log("etcd committed nothing from %s for %v", out.From.Format("15:04:05.000"), out.To.Sub(out.From).Round(time.Millisecond))
	}
	vs := Check(h)
	lin, err := op.check(h.Server, o.Dir)
	if err != nil {
		return nil, nil, err
	}
	o.Log("%v", lin)
	if lin.Result != porcupine.Ok {
		vs = append(vs, Violation{Kind: VNotLinearizable, Subject: "the operator's coordinator history", Detail: lin.String()})
	}
	if len(vs) > 0 {
		dump(o, h, vs)
	}
	s := summarize(h, in.Counts(), vs, o.Seed)
	s.Linearizability = linSummary{Operations: lin.Operations, Partitions: lin.Partitions, Unknown: lin.Unknown,
		CheckTime: lin.Took.String(), Result: string(lin.Result),
		Starts: lin.Starts, StartsSettled: lin.StartsSettled, ByPlacement: lin.ByPlacement}
	s.FaultSeed = o.FaultSeed
	if o.OldBin != "" {
		s.Releases = summarizeMixed(h, &c.rel, len(c.coords), o.OldRelease, s.FaultKinds)
	}
	s.WorkloadTime = elapsed.Round(time.Second).String()
	var down time.Duration
	for _, out := range h.EtcdOutages {
		down += out.To.Sub(out.From)
	}
	s.EtcdOutage = down.Round(time.Millisecond).String()
	if f := in.Failures(); len(f) > 0 {
		return s, vs, fmt.Errorf("%d faults did not recover: %v", len(f), f)
	}
	return s, vs, nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func (wl *Workload) counts() (calls, cancels int) {
	return len(wl.rec.snapshot()), int(wl.cancels.Load())
}

// settle waits until every call is decided, every handler has returned
// and retention has removed every per-call key, and assembles the history.
func settle(ctx context.Context, c *Cluster, co *collector, wl *Workload) (*History, error) {
	h := &History{LeaseTTL: leaseTTL, Slack: 5 * time.Second, InFlight: map[string]int{}}
	// Every call decides within its deadline plus the lease TTL.
	waitFor(ctx, callTimeout+leaseTTL+h.Slack, "every call decided", func() bool { return co.running() == 0 })
	for w, admin := range c.workerAdmin {
		c.mu.Lock()
		name := c.workerName[w]
		c.mu.Unlock()
		bound := handlersBound
		if old, _ := c.rel.at(name, time.Now()); old {
			bound = oldHandlersBound
		}
		var n int
		err := waitFor(ctx, bound, "handlers returned", func() bool {
			var err error
			n, err = workerInFlight(ctx, admin)
			return err == nil && n == 0
		})
		if err != nil {
			h.InFlight[name] = max(n, 1)
			dumpGoroutines(ctx, admin, filepath.Join(c.opts.Dir, name+".goroutines"))
		}
	}
	listed, err := listAudit(ctx, c.Coord)
	if err != nil {
		return nil, fmt.Errorf("ListAudit: %w", err)
	}
	h.Listed = listed
	// Then retention takes every per-call key away.
	waitFor(ctx, 2*retention+leaseTTL+10*time.Second, "retention", func() bool {
		keys, err := leakedKeys(ctx, c.Etcd)
		return err == nil && len(keys) == 0
	})
	if h.Leaked, err = leakedKeys(ctx, c.Etcd); err != nil {
		return nil, err
	}
	// The watch must have seen everything up to now.
	resp, err := c.Etcd.Get(ctx, "/robustness/ready")
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 30*time.Second, "watch caught up", func() bool { return co.caughtUp(resp.Header.Revision) }); err != nil {
		return nil, err
	}
	h.Server = co.snapshot()
	for _, cc := range wl.rec.snapshot() {
		if cc.Sent.IsZero() {
			continue // never reached the wire: nothing to check
		}
		h.Client = append(h.Client, cc)
	}
	h.Tasks = wl.tasks.snapshot()
	return h, nil
}

func summarize(h *History, faults map[string]int, vs []Violation, seed int64) *Summary {
	s := &Summary{Seed: seed, FaultKinds: faults, FaultsInjected: total(faults), Violations: len(vs), ByClient: map[string]int{}}
	for _, c := range h.Client {
		s.Calls++
		s.ByClient[c.Client]++
		if !c.CancelSent.IsZero() {
			s.Cancels++
		}
	}
	records := 0
	tasks := taskPrincipals(h)
	for _, sc := range h.Server {
		if sc.Principal == operatorPrincipal || tasks[sc.Principal] {
			continue // the model check's or the task clients', not the call workload's
		}
		records++
		if sc.RetryOf != "" {
			s.Retried++
		}
		switch sc.Final().State {
		case stCompleted:
			s.Completed++
		case stCancelled:
			s.Cancelled++
		case stFailed:
			s.Failed++
		}
	}
	s.Refused = s.Calls - (records - s.Retried)
	nr := checkRecorded(h, indexServer(h.Server))
	s.SeenWithoutRecord, s.Excused = nr.seen, nr.excused
	s.Tasks = summarizeTasks(h)
	return s
}

// Report renders violations, the seed first so the run can be replayed.
func Report(seed int64, vs []Violation) string {
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Kind < vs[j].Kind })
	out := fmt.Sprintf("seed %d: %d violations\n", seed, len(vs))
	kinds := map[string]int{}
	for _, v := range vs {
		kinds[v.Kind]++
	}
	out += fmt.Sprintf("by kind: %v\n", kinds)
	for i, v := range vs {
		if i == 20 {
			out += fmt.Sprintf("... and %d more\n", len(vs)-20)
			break
		}
		out += v.String() + "\n"
	}
	return out
}

// dump writes the whole history and the violations next to the logs, and
// a copy to the system temp dir that outlives the test.
func dump(o RunOptions, h *History, vs []Violation) {
	b, err := json.MarshalIndent(struct {
		Violations []Violation `json:"violations"`
		History    *History    `json:"history"`
	}{vs, h}, "", " ")
	if err != nil {
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("robustness-%d.json", o.Seed))
	if os.WriteFile(path, b, 0o644) == nil {
		o.Log("history and violations written to %s", path)
	}
}
