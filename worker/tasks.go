package worker

import (
	"context"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Task support of a tool (MCP execution.taskSupport).
const (
	TaskForbidden = "forbidden"
	TaskOptional  = "optional"
	TaskRequired  = "required"
)

// A call that runs an MCP task (ExecuteRequest.task) outlives the Execute
// stream that started it: the task belongs to its principal, not to the
// gateway or the client connection, and its result is read later, from any
// gateway, out of the coordinator. So its handler's context does not end
// with the stream; it ends when the coordinator stops the call (tasks/cancel
// won, or the task failed), at the call's deadline (the task's TTL), or at
// the worker's shutdown. Its result goes to the coordinator with the
// completion, which stores it in the same decision. If the worker itself is
// lost, the coordinator's janitor fails the task.
//
// The stream, while it lasts, still carries progress and the outcome, so a
// gateway that waits can relay them.

// callParent is the context a call's handler runs under, before its
// deadline: the stream's, unless the call runs a task.
func callParent(req *pb.ExecuteRequest, stream pb.WorkerService_ExecuteServer) context.Context {
	if req.GetTask() {
		return context.WithoutCancel(stream.Context())
	}
	return stream.Context()
}

// taskResult is what a completion carries of its result: all of it for a
// task, which the coordinator stores; nothing for other calls, whose
// results go only to their gateway.
func (e *execution) taskResult(body []byte) []byte {
	if !e.task {
		return nil
	}
	return body
}
