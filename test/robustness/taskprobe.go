package robustness

import (
	"context"
	"fmt"
)

// taskProbe is a task created on the gateway kill_gateway then kills with
// SIGKILL, between the task's creation and its result: the other gateway
// must serve it (read it, wait for its result, list it, and refuse to
// cancel it once it ended).
type taskProbe struct {
	tc   *taskClient
	t    *ClientTask
	done chan struct{} // closed when serve's requests are done
}

// probeTaskSeconds is how long the probe's task works: it ends within its
// TTL, after its gateway was killed.
const probeTaskSeconds = 1.5

// aimTask creates the probe's task on gateway gw; nil if it could not (the
// fault goes on without one, and says so).
func (in *Injector) aimTask(ctx context.Context, gw int) *taskProbe {
	tc, principal, err := in.wl.newTaskClient(ctx)
	if err != nil {
		in.log("fault %s: no task probe: %v", FKillGateway, err)
		return nil
	}
	t := in.wl.newTask(principal, FKillGateway, probeTaskSeconds, gw)
	t.ServeOn = 1 - gw
	in.wl.tasks.add(t)
	if !tc.create(ctx, t) {
		in.log("fault %s: no task probe: tools/call on gateway %d: %s", FKillGateway, gw, t.CreateErr)
		tc.close()
		return nil
	}
	return &taskProbe{tc: tc, t: t}
}

// describe names the probe in the fault's log line.
func (p *taskProbe) describe() string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf(", after it created task %s (to be served by gateway %d)", p.t.TaskID, p.t.ServeOn)
}

// serve starts asking the surviving gateway for the task.
func (p *taskProbe) serve(ctx context.Context) {
	if p == nil {
		return
	}
	p.done = make(chan struct{})
	go func() { // owned by p: wait waits for it
		defer close(p.done)
		for _, m := range []string{"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"} {
			p.tc.op(ctx, p.t, p.t.ServeOn, m)
		}
	}()
}

// wait waits for serve's requests and closes the probe's sessions.
func (p *taskProbe) wait() {
	if p == nil {
		return
	}
	if p.done != nil {
		<-p.done
	}
	p.tc.close()
}
