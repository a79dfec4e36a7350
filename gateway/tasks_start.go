package gateway

import (
	"context"
	"encoding/json"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// A call that becomes a task (the tasks extension's "MRTR before task
// creation"): a tool whose handler decides when it becomes a task
// (Tool.defer_task) gets an ordinary call, so its requests toward a
// 2026-07-28 client resolve as input_required rounds on tools/call. When
// the handler asks to go on as a task (worker Call.StartTask, a TaskStart
// event), the gateway creates the task, durably, and answers the round
// with CreateTaskResult, carrying no requestState; the task's call runs
// the handler again with every answer the client gave in its rounds, as
// the next round would have; and this call ends, cancelled by the tool
// like a round that answered input_required. A call that cannot become a
// task is told so, and its handler may answer it itself.

// outcomeTask is the outcome of a call that went on as a task.
const outcomeTask = "task"

// startTask handles a handler's request to continue its call as a task.
func (c *call) startTask(wc pb.WorkerServiceClient, begun *pb.BeginResponse, p *routed, ts *pb.TaskStart) {
	callID, seq := begun.GetCallId(), ts.GetSeq()
	if why := c.taskRefusal(p); why != "" {
		c.refuse(wc, callID, seq, jsonrpc.CodeMethodNotFound, why)
		return
	}
	exec := c.s.taskExecute(p, c.scopes, taskRun{caps: c.children.caps, inputs: c.children.roundTrip.inputs})
	created, e := c.s.newTask(requestID(c.id), p, 0, exec)
	if e != nil {
		c.refuse(wc, callID, seq, e.Code, e.Message)
		return
	}
	t := created.GetTask()
	c.setOutcome(outcomeTask)
	if !c.respond(jsonrpc.Response(c.id, createTaskResult2026(t))) {
		// The request ended (its client went) before it could learn of
		// the task: nobody can reach the task, so it must not run.
		c.s.dropTask(t.GetTaskId())
		return
	}
	c.children.note(seq, taskStartMethodName, "task:"+t.GetTaskId())
	c.s.startTaskRun(p, created, exec) // its client already knows of it
	c.sendCancel(&cancelOrder{who: pb.Initiator_INITIATOR_TOOL, reason: "the call continues as task " + t.GetTaskId()})
}

// taskStartMethodName names a handler's request to become a task in the
// call's audit of its requests (worker's taskStartMethod).
const taskStartMethodName = "io.mcpcancel/startTask"

// taskRefusal says why the call cannot become a task, or "".
func (c *call) taskRefusal(p *routed) string {
	switch {
	case !c.rev2026:
		return "a 2025-era client asks for a task itself, with params.task"
	case c.method != "tools/call":
		return "only tools/call may become a task"
	case !c.optedIn():
		return "the client did not opt into the " + mcpspec.ExtensionTasks + " extension on this request"
	}
	ctx, cancel := context.WithTimeout(c.s.g.base, cancelTimeout)
	defer cancel()
	if support, _ := c.s.g.taskSupport(ctx, p.target); support != taskOptional && support != taskRequired {
		return "tool " + p.target + " does not run as a task"
	}
	return ""
}

// optedIn says whether the client's declared capabilities include the
// tasks extension.
func (c *call) optedIn() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	json.Unmarshal(c.children.caps, &caps)
	_, ok := caps.Extensions[mcpspec.ExtensionTasks]
	return ok
}

// dropTask cancels a task whose client never learned of it.
func (s *session) dropTask(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.g.base), cancelTimeout)
	defer cancel()
	_, err := s.g.coord.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: id, Principal: s.principal,
		Reason: "the request that created the task ended before its client learned of it"})
	if err != nil {
		s.g.log.Warn("cannot cancel a task nobody knows of; it ends at its TTL", "task", id, "err", err)
	}
}
