package robustness

import (
	"context"
	"fmt"
	"time"
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

// probeTaskSeconds is how long the probe's task works: it ends after its
// gateway was killed, early in its TTL, so that the surviving gateway has
// most of the TTL to serve it.
const probeTaskSeconds = 0.5

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

// serve starts asking the surviving gateway for the task. A tasks/result
// that brings no outcome (the gateway could not reach the coordinators,
// or did not answer) is asked again, as a client would, while the TTL
// runs: what is checked is that the surviving gateway serves the result.
// Every attempt is in the history, and the summary counts the store
// errors.
func (p *taskProbe) serve(ctx context.Context) {
	if p == nil {
		return
	}
	p.done = make(chan struct{})
	go func() { // owned by p: wait waits for it
		defer close(p.done)
		j := p.t.ServeOn
		p.tc.op(ctx, p.t, j, "tasks/get")
		for {
			p.tc.op(ctx, p.t, j, "tasks/result")
			if p.t.Ops[len(p.t.Ops)-1].Status != "" || time.Now().After(p.t.CreatedAt.Add(p.t.TTL)) {
				break
			}
			pace(ctx, 100*time.Millisecond)
		}
		p.tc.op(ctx, p.t, j, "tasks/list")
		p.tc.op(ctx, p.t, j, "tasks/cancel")
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
