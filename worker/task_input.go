package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// A task's requests toward its client. A 2026-07-28 task's client is not
// on a stream the worker could write to: it polls the task. So a request
// a task's handler makes (Call.Elicit, Sample, Roots, AskAll) is recorded
// at the coordinator (SetTaskInput), which makes the task input_required
// with the request in its inputRequests; the client answers with
// tasks/update, the gateway that receives it takes the answer out of the
// task in one fenced transaction (UpdateTask) and delivers it here with
// Answer, like any answer. A request the handler withdraws is taken out
// of the task again. The worker still alone decides, once, whether a
// request was answered or withdrawn.
//
// A task whose gateway passed no client capabilities (a 2025-11-25 task,
// whose client would be asked on tasks/result, which the gateway does not
// relay requests on) declares nothing, so its requests are refused with
// ErrNotDeclared before they get here.

// taskInputTimeout bounds recording a task's requests at the coordinator.
const taskInputTimeout = 10 * time.Second

// taskAsk is a request of a task's call on its way to the coordinator.
type taskAsk struct {
	a  *asked
	in *pb.TaskInput
}

// askInTask records a task's request at the coordinator, with the others
// of an AskAll at once (more says others follow). A request that cannot
// be recorded fails.
func (e *execution) askInTask(a *asked, method string, params json.RawMessage, more bool) {
	t := &e.children
	t.mu.Lock()
	t.batch = append(t.batch, taskAsk{a: a, in: &pb.TaskInput{Key: a.key, Seq: a.seq, Method: method, ParamsJson: params}})
	batch := t.batch
	if !more {
		t.batch = nil
	}
	t.mu.Unlock()
	if more {
		return
	}
	ins := make([]*pb.TaskInput, len(batch))
	for i, b := range batch {
		ins[i] = b.in
	}
	err := e.setTaskInput(&pb.SetTaskInputRequest{Call: e.ref, Ask: ins})
	if err == nil {
		return
	}
	err = fmt.Errorf("%w: the task could not wait for its client's input: %v", ErrCallEnded, err)
	for _, b := range batch {
		if t.take(b.a.seq, "refused") {
			b.a.ch <- clientAnswer{err: err}
		}
	}
}

// withdrawInTask takes a withdrawn request out of the task, so that its
// client is no longer asked. If that fails the request stays listed, and
// an answer to it is ignored here as late.
func (e *execution) withdrawInTask(key string) {
	if e.children.ctx.Err() != nil {
		return // the task ended: its record lists nothing more
	}
	if err := e.setTaskInput(&pb.SetTaskInputRequest{Call: e.ref, Withdraw: []string{key}}); err != nil {
		e.w.log.Warn("could not withdraw a task's request toward its client", "call", e.ref.GetCallId(), "key", key, "err", err)
	}
}

func (e *execution) setTaskInput(req *pb.SetTaskInputRequest) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.children.ctx), taskInputTimeout)
	defer cancel()
	_, err := e.w.coord.SetTaskInput(ctx, req)
	return err
}

// ErrNoTask says the call cannot continue as a task: its client did not
// opt into tasks (the 2026-07-28 tasks extension), it is not a tools/call
// of a tool that supports tasks, or the task could not be created. The
// handler may go on and answer the call itself.
var ErrNoTask = errors.New("worker: the call cannot continue as a task")

// StartTask continues the call as an MCP task, for a tool whose handler
// resolves its client's input before it becomes a task (Tool.DeferTask),
// as the tasks extension says a server SHOULD: the 2026-07-28 client's
// input_required rounds happen on tools/call, and the last round answers
// with the task.
//
// In a call that already runs a task it returns nil at once: the handler
// goes on as the task. In an ordinary call whose client can take a task,
// the gateway creates the task, answers the client with it and ends this
// call; StartTask then returns ErrCallEnded, and the handler should
// return. The task runs the handler again with every answer the call had,
// so what the handler did before StartTask must be safe to do again, as
// under 2026-07-28 multi round-trip requests. When the call cannot become
// a task StartTask returns an error wrapping ErrNoTask.
func (c *Call) StartTask(ctx context.Context) error {
	if c.exec == nil {
		return ErrCallEnded
	}
	e := c.exec
	if e.task {
		return nil
	}
	a := e.children.prepareTaskStart()
	if !e.sendRunning(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_TaskStart{TaskStart: &pb.TaskStart{Seq: a.seq}}}) {
		e.children.take(a.seq, "cancelled")
		return ErrCallEnded
	}
	_, err := e.wait(ctx, a)
	var refused *ClientError
	if errors.As(err, &refused) {
		return fmt.Errorf("%w: %s", ErrNoTask, refused.Message)
	}
	if err == nil {
		err = ErrCallEnded // the gateway says nothing on success but ends the call
	}
	return err
}

// taskStartMethod names a StartTask in the call's audit of its requests.
const taskStartMethod = "io.mcpcancel/startTask"

func (t *childRequests) prepareTaskStart() *asked {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	a := &asked{seq: t.next, ch: make(chan clientAnswer, 1)}
	if t.methods == nil {
		t.methods = map[int64]string{}
	}
	t.methods[a.seq] = taskStartMethod
	if t.pending == nil {
		t.pending = map[int64]chan clientAnswer{}
	}
	t.pending[a.seq] = a.ch
	return a
}
