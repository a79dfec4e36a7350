package robustness

// Faults inside a call's window (DESIGN section 4): between a client's
// tools/call and its record's commit a call may already run on its
// worker. These faults strike a few milliseconds after a client's request
// went out: they kill (SIGKILL) its worker, its gateway or both, or pause
// etcd's leader for about a second, so that the Begin, the Execute and
// the decisions by placement race the loss. The workload signals the
// moment (windowSignal); the injector waits for it a bounded time.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// Fault kinds inside the window.
const (
	FKillWorkerInWindow  = "kill_worker_in_window"  // a worker, just after a call went out
	FKillGatewayInWindow = "kill_gateway_in_window" // the call's gateway
	FKillBothInWindow    = "kill_both_in_window"    // the call's gateway and a worker
	FPauseLeaderInWindow = "pause_etcd_leader_in_window"
)

func init() {
	faultKinds = append(faultKinds, FKillWorkerInWindow, FKillGatewayInWindow, FKillBothInWindow, FPauseLeaderInWindow)
}

// windowWait bounds how long a fault waits for a call to go out.
const windowWait = 5 * time.Second

// sentCall is a tools/call as it went out, through HTTP gateway gw.
type sentCall struct {
	c  *ClientCall
	gw int
	at time.Time
}

// windowSignal hands the injector the next tools/call that goes out
// through an HTTP gateway, when it asks for one.
type windowSignal struct {
	mu   sync.Mutex
	want chan sentCall // guarded by mu; nil unless armed
}

// arm asks for the next call sent; disarm withdraws the request.
func (s *windowSignal) arm() <-chan sentCall {
	ch := make(chan sentCall, 1)
	s.mu.Lock()
	s.want = ch
	s.mu.Unlock()
	return ch
}

func (s *windowSignal) disarm() {
	s.mu.Lock()
	s.want = nil
	s.mu.Unlock()
}

// sent reports a call that is going out; it never blocks a client.
func (s *windowSignal) sent(gw int, c *ClientCall, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.want != nil {
		s.want <- sentCall{c: c, gw: gw, at: at} // buffered, and the only send before disarming
		s.want = nil
	}
}

// Kill is one process the injector killed (or stopped), for the checker
// to excuse what only that loss explains.
type Kill struct {
	Kind string    `json:"kind"` // "worker" or "gateway"
	Name string    `json:"name"` // the worker's name, or gatewayName(i)
	At   time.Time `json:"at"`
}

func gatewayName(i int) string { return fmt.Sprintf("gateway%d", i) }

// killed notes a kill for the history.
func (in *Injector) killed(kind, name string) {
	in.mu.Lock()
	in.kills = append(in.kills, Kill{Kind: kind, Name: name, At: time.Now()})
	in.mu.Unlock()
}

// Kills lists the processes killed, in order.
func (in *Injector) Kills() []Kill {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Kill(nil), in.kills...)
}

// killWorker kills worker slot w, noting it, and waits until it is gone.
func (in *Injector) killWorker(w int) {
	in.killed("worker", in.c.name(w))
	in.c.workers[w].kill()
}

// killGateway kills HTTP gateway i, noting it, and waits until it is gone.
func (in *Injector) killGateway(i int) {
	in.killed("gateway", gatewayName(i))
	in.c.gateways[i].kill()
}

// strike SIGKILLs the processes at once, noting each, and returns when
// the signals went out; the caller then waits for each with kill.
func (in *Injector) strike(gw, w int) time.Time {
	if gw >= 0 {
		in.killed("gateway", gatewayName(gw))
		in.c.gateways[gw].signal(syscall.SIGKILL)
	}
	if w >= 0 {
		in.killed("worker", in.c.name(w))
		in.c.workers[w].signal(syscall.SIGKILL)
	}
	return time.Now()
}

// awaitSent waits for the next call to go out, at most windowWait.
func (in *Injector) awaitSent(ctx context.Context) (sentCall, bool) {
	ch := in.wl.window.arm()
	defer in.wl.window.disarm()
	t := time.NewTimer(windowWait)
	defer t.Stop()
	select {
	case sc := <-ch:
		return sc, true
	case <-t.C:
	case <-ctx.Done():
	}
	return sentCall{}, false
}

// injectWindow injects a fault inside a call's window; ok is false for
// other kinds.
func (in *Injector) injectWindow(ctx context.Context, kind string) (ok bool, err error) {
	switch kind {
	case FKillWorkerInWindow, FKillGatewayInWindow, FKillBothInWindow, FPauseLeaderInWindow:
	default:
		return false, nil
	}
	r := in.r
	leader := -1
	if kind == FPauseLeaderInWindow {
		if leader, err = in.c.etcdLeader(ctx); err != nil {
			return true, err
		}
	}
	w := r.IntN(len(in.c.workers))
	down := 300*time.Millisecond + time.Duration(r.Int64N(int64(time.Second)))
	sc, sent := in.awaitSent(ctx)
	if !sent {
		in.log("fault %s: no call went out within %v; none injected", kind, windowWait)
		return true, nil
	}
	// At once: the request is on its way, the gateway placing the call.
	switch kind {
	case FKillWorkerInWindow:
		struck := in.strike(-1, w)
		in.note(kind, "worker %d, %v after %s went out", w, struck.Sub(sc.at).Round(time.Microsecond), sc.c.Ref)
	case FKillGatewayInWindow:
		struck := in.strike(sc.gw, -1)
		in.note(kind, "gateway %d, %v after %s went out", sc.gw, struck.Sub(sc.at).Round(time.Microsecond), sc.c.Ref)
	case FKillBothInWindow:
		struck := in.strike(sc.gw, w)
		in.note(kind, "gateway %d and worker %d, %v after %s went out", sc.gw, w, struck.Sub(sc.at).Round(time.Microsecond), sc.c.Ref)
	case FPauseLeaderInWindow:
		pause := 800*time.Millisecond + time.Duration(r.Int64N(int64(400*time.Millisecond)))
		in.c.etcd[leader].signal(syscall.SIGSTOP)
		in.note(kind, "etcd member %d for %v, from %v after %s went out", leader, pause, time.Since(sc.at).Round(time.Microsecond), sc.c.Ref)
		pace(ctx, pause)
		in.c.etcd[leader].signal(syscall.SIGCONT)
		return true, in.c.waitEtcdHealthy(ctx)
	}
	if kind != FKillGatewayInWindow {
		in.c.workers[w].kill() // gone: waits for its exit
	}
	if kind != FKillWorkerInWindow {
		in.c.gateways[sc.gw].kill()
	}
	pace(ctx, down)
	if kind != FKillGatewayInWindow {
		err = in.restart(ctx, w)
	}
	if kind != FKillWorkerInWindow {
		err = errors.Join(err, in.restartGateway(ctx, sc.gw))
	}
	return true, err
}

// restartGateway starts HTTP gateway i again and waits until it serves.
func (in *Injector) restartGateway(ctx context.Context, i int) error {
	if err := in.c.gateways[i].start(); err != nil {
		return err
	}
	return in.c.waitGateway(ctx, i)
}
