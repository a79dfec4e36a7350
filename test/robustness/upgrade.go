package robustness

// The upgrade fault (issue 36): a process stops as in a rolling restart
// (SIGTERM, ending within its grace) and starts again on the other
// release's binary, this tree's to the last release's (a rollback) or
// back (an upgrade). The last release is built from the repository's
// history at the commit CHANGELOG.md records (internal/releasetest).
// One process at a time runs it: a rollback picks one, by role in turn
// (a worker, an HTTP gateway, a coordinator), and the next upgrade fault
// brings it back. Between the two every other fault runs against the
// mixed fleet; a process killed meanwhile restarts on the release it
// ran. The arguments the harness passes are the same for both releases:
// the last release knows every flag they use.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Fault kinds of releases. FUpgrade is the fault; it is counted as a
// rollback or an upgrade as it goes.
const (
	FUpgrade  = "upgrade"  // a process of the last release restarted on this tree's
	FRollback = "rollback" // a process of this tree restarted on the last release's
)

// upgradeEvery makes every upgradeEvery-th fault an upgrade fault (when
// the last release could be built): a short run sees a worker and a
// gateway rolled back and upgraded again, a soak every role, in turn.
const upgradeEvery = 4

// Graces of a rolling restart: each process must end within its own
// (the workers' drain, the gateways' and coordinators' shutdown) plus
// this much.
const stopMargin = 5 * time.Second

const (
	gatewayGrace = time.Second     // the gateways' --shutdown-grace
	coordGrace   = 2 * time.Second // the coordinators' --shutdown-timeout
)

// releaseLog says which release each component ran when, by the name
// its call records carry: a coordinator's, a worker's or a gateway's.
type releaseLog struct {
	mu      sync.Mutex
	changes map[string][]releaseChange // guarded by mu; oldest first
}

type releaseChange struct {
	at  time.Time
	old bool
}

// set notes that name runs the last release (old) or this tree from
// now; it is called before the process starts.
func (l *releaseLog) set(name string, old bool) { l.setAt(name, old, time.Now()) }

func (l *releaseLog) setAt(name string, old bool, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changes == nil {
		l.changes = map[string][]releaseChange{}
	}
	l.changes[name] = append(l.changes[name], releaseChange{at: t, old: old})
}

// at says what name ran at t; ok is false if nothing so named had
// started by then.
func (l *releaseLog) at(name string, t time.Time) (old, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.changes[name] {
		if ch.at.After(t) {
			break
		}
		old, ok = ch.old, true
	}
	return old, ok
}

// coordGate tells the operator which coordinators run this tree. Its
// Start and its decisions by placement are this tree's API, which the
// last release does not serve (it has no Start and reads no
// CallRef.placement): the operator sends them only to this tree's
// coordinators. A coordinator's rollback waits for the operations that
// hold it as this tree's.
type coordGate struct {
	mu  sync.RWMutex
	old []bool // by coordinator; guarded by mu
}

// current lists the coordinators that run this tree, stable until done.
func (g *coordGate) current() (idx []int, done func()) {
	g.mu.RLock()
	for i, old := range g.old {
		if !old {
			idx = append(idx, i)
		}
	}
	return idx, g.mu.RUnlock
}

func (g *coordGate) set(i int, old bool) {
	g.mu.Lock()
	g.old[i] = old
	g.mu.Unlock()
}

// Roles the upgrade fault rolls back, in turn by default.
const (
	RoleWorker      = "worker"
	RoleGateway     = "gateway"
	RoleCoordinator = "coordinator"
)

var upgradeRoles = []string{RoleWorker, RoleGateway, RoleCoordinator}

// upgrader is the injector's state of releases.
type upgrader struct {
	release string   // the last release's version, "v0.1.0"
	roles   []string // rolled back in turn
	rolled  int      // rollbacks so far: the next one's role
	// back upgrades the process rolled back; nil while every process
	// runs this tree.
	back func(context.Context) error
}

// upgradeDue says fault i is an upgrade fault.
func (in *Injector) upgradeDue(i int) bool {
	return in.c.opts.OldBin != "" && i%upgradeEvery == upgradeEvery-1
}

// upgrade rolls a process back to the last release, or upgrades the one
// rolled back.
func (in *Injector) upgrade(ctx context.Context) error {
	u := &in.up
	if in.c.opts.OldBin == "" {
		in.log("fault %s: no binary of the last release; none injected", FUpgrade)
		return nil
	}
	if back := u.back; back != nil {
		u.back = nil
		return back(ctx)
	}
	role := u.roles[u.rolled%len(u.roles)]
	u.rolled++
	switch role {
	case RoleWorker:
		w := in.r.IntN(len(in.c.workers))
		u.back = func(ctx context.Context) error { return in.switchWorker(ctx, w, false) }
		return in.switchWorker(ctx, w, true)
	case RoleGateway:
		i := in.r.IntN(len(in.c.gateways))
		u.back = func(ctx context.Context) error { return in.switchGateway(ctx, i, false) }
		return in.switchGateway(ctx, i, true)
	default:
		i := in.r.IntN(len(in.c.coords))
		u.back = func(ctx context.Context) error { return in.switchCoordinator(ctx, i, false) }
		return in.switchCoordinator(ctx, i, true)
	}
}

// releaseOf is the binary of the last release (old) or this tree, the
// kind of fault that moves a process to it, and its name.
func (in *Injector) releaseOf(old bool) (bin, kind, name string) {
	if old {
		return in.c.opts.OldBin, FRollback, in.up.release
	}
	return in.c.opts.Bin, FUpgrade, "this tree"
}

// switchWorker restarts worker slot w, drained, on the other release,
// under a new name.
func (in *Injector) switchWorker(ctx context.Context, w int, old bool) error {
	bin, kind, rel := in.releaseOf(old)
	in.note(kind, "worker %d (%s) to %s", w, in.c.name(w), rel)
	p := in.c.workers[w]
	err := in.stopWithin(p, drainTimeout, !old)
	p.setBin(bin)
	return errors.Join(err, in.restart(ctx, w))
}

// switchGateway restarts HTTP gateway i on the other release.
func (in *Injector) switchGateway(ctx context.Context, i int, old bool) error {
	bin, kind, rel := in.releaseOf(old)
	in.note(kind, "gateway %d to %s", i, rel)
	p := in.c.gateways[i]
	err := in.stopWithin(p, gatewayGrace, !old)
	p.setBin(bin)
	in.c.rel.set(gatewayRecordName(i), old)
	return errors.Join(err, in.restartGateway(ctx, i))
}

// switchCoordinator restarts coordinator i on the other release. The
// operator stops sending it this tree's API before it goes, and starts
// again once this tree's serves.
func (in *Injector) switchCoordinator(ctx context.Context, i int, old bool) error {
	bin, kind, rel := in.releaseOf(old)
	in.note(kind, "coordinator %d to %s", i, rel)
	if old {
		in.c.gate.set(i, true)
	}
	p := in.c.coords[i]
	stopErr := in.stopWithin(p, coordGrace, !old)
	p.setBin(bin)
	in.c.rel.set(coordName(i), old)
	err := p.start()
	if err == nil {
		err = in.c.waitCoordinator(ctx, i)
	}
	if err == nil && !old {
		in.c.gate.set(i, false)
	}
	return errors.Join(stopErr, err)
}

// stopWithin stops p as a rolling restart does and fails if it took
// longer than its grace plus stopMargin (it is then killed, and the
// switch goes on: the fault is reported, the fleet kept whole).
//
// A process of the last release (lastRelease) that takes longer is
// killed the same way but only logged: v0.1.0's gRPC
// server has no handshake timeout (this tree's since a044949), so a
// connection a silent fault keeps mid-handshake holds its stop, even
// its forced one, for 120 s. The soak at 4942689 met it once in 24
// upgrades. This tree's processes must stop in time.
func (in *Injector) stopWithin(p *process, grace time.Duration, lastRelease bool) error {
	began := time.Now()
	p.stop(grace + stopMargin)
	if took := time.Since(began); took >= grace+stopMargin {
		if lastRelease {
			in.log("%s, of %s, did not stop within %v of SIGTERM; killed (the last release's known defect)", p.name, in.up.release, grace+stopMargin)
			return nil
		}
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", p.name, grace+stopMargin)
	}
	return nil
}

// gatewayRecordName and coordName are the names HTTP gateway i and
// coordinator i give themselves (--name).
func gatewayRecordName(i int) string { return fmt.Sprintf("gw%d", i) }
func coordName(i int) string         { return fmt.Sprintf("c%d", i) }

// mixedSummary counts the calls settled across releases. A call's
// gateway and worker are named in its record; which release each ran is
// the harness's log, read at the call's request time (a gateway keeps
// its calls; a worker's name is never reused). Which coordinator served
// a call is not recorded: a call counts against the coordinators only
// when every coordinator ran the gateway's other release, and apart
// when they ran both.
type mixedSummary struct {
	Release   string `json:"release"` // the last release, as built
	Rollbacks int    `json:"rollbacks"`
	Upgrades  int    `json:"upgrades"`
	// Settled calls whose gateway ran one release and worker the other,
	// by the gateway's release.
	OldGatewayNewWorker int `json:"old_gateway_new_worker"`
	NewGatewayOldWorker int `json:"new_gateway_old_worker"`
	// Settled calls whose gateway ran one release and every coordinator
	// the other, by the gateway's release.
	OldGatewayNewCoordinators int `json:"old_gateway_new_coordinators"`
	NewGatewayOldCoordinators int `json:"new_gateway_old_coordinators"`
	// Settled calls requested while the coordinators ran both releases.
	CoordinatorsMixed int `json:"coordinators_mixed"`
	// Settled calls any process of the last release took part in, and
	// those whose parts the log could not name (not counted above).
	WithOld    int `json:"with_old"`
	Unattested int `json:"unattested"`
}

// summarizeMixed counts h's settled calls across releases.
func summarizeMixed(h *History, rel *releaseLog, coords int, release string, faults map[string]int) *mixedSummary {
	m := &mixedSummary{Release: release, Rollbacks: faults[FRollback], Upgrades: faults[FUpgrade]}
	for _, sc := range h.Server {
		if st := sc.Final().State; sc.Principal == operatorPrincipal || st != stCompleted && st != stCancelled && st != stFailed {
			continue // unsettled, or the operator's (on no worker)
		}
		at := sc.Requested
		gw, okG := rel.at(sc.Gateway, at)
		wk, okW := rel.at(sc.Worker, at)
		var cOld, cNew int
		okC := true
		for i := range coords {
			old, ok := rel.at(coordName(i), at)
			okC = okC && ok
			if old {
				cOld++
			} else {
				cNew++
			}
		}
		if !okG || !okW || !okC {
			m.Unattested++
			continue
		}
		if gw || wk || cOld > 0 {
			m.WithOld++
		}
		switch {
		case gw && !wk:
			m.OldGatewayNewWorker++
		case !gw && wk:
			m.NewGatewayOldWorker++
		}
		switch {
		case cOld > 0 && cNew > 0:
			m.CoordinatorsMixed++
		case gw && cOld == 0:
			m.OldGatewayNewCoordinators++
		case !gw && cNew == 0:
			m.NewGatewayOldCoordinators++
		}
	}
	return m
}
