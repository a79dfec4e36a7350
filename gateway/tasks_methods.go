package gateway

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/status"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// taskMethods are the tasks/* requests.
var taskMethods = map[string]bool{"tasks/get": true, "tasks/result": true, "tasks/list": true, "tasks/cancel": true, "tasks/update": true}

type taskParams struct {
	TaskID string `json:"taskId"`
	Cursor string `json:"cursor"`
}

// taskMethod answers a tasks/* request, in the client's era.
func (s *session) taskMethod(ctx context.Context, m *jsonrpc.Message) (any, *jsonrpc.Error) {
	var p taskParams
	if len(m.Params) > 0 && json.Unmarshal(m.Params, &p) != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid %s params", m.Method)
	}
	if s.speaks2026() {
		return s.taskMethod2026(ctx, m, p)
	}
	switch m.Method {
	case "tasks/get":
		t, e := s.getTask(ctx, p.TaskID, false)
		if e != nil {
			return nil, e
		}
		return task2025(t), nil
	case "tasks/result":
		return s.taskResult(ctx, p.TaskID)
	case "tasks/list":
		return s.listTasks(ctx, p.Cursor)
	case "tasks/cancel":
		t, won, e := s.cancelTask(ctx, p.TaskID)
		if e != nil {
			return nil, e
		}
		if !won {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "task %s is already %s; a terminal task cannot be cancelled", p.TaskID, taskStatusNames[t.GetStatus()])
		}
		return task2025(t), nil
	}
	return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method not found: %s", m.Method)
}

// taskMethod2026 answers the extension's tasks/* requests.
func (s *session) taskMethod2026(ctx context.Context, m *jsonrpc.Message, p taskParams) (any, *jsonrpc.Error) {
	switch m.Method {
	case "tasks/result", "tasks/list":
		return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "Method not found: %s is not part of the %s extension", m.Method, mcpspec.ExtensionTasks)
	}
	if !optedIn2026(paramsOf(m)) {
		data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{mcpspec.ExtensionTasks: map[string]any{}}}})
		return nil, &jsonrpc.Error{Code: mcpspec.CodeMissingRequiredClientCapability, Message: "Missing required client capability: " + m.Method + " needs the " + mcpspec.ExtensionTasks + " extension", Data: data}
	}
	switch m.Method {
	case "tasks/get":
		t, e := s.getTask(ctx, p.TaskID, true)
		if e != nil {
			return nil, e
		}
		return detailedTask(t), nil
	case "tasks/cancel":
		if _, _, e := s.cancelTask(ctx, p.TaskID); e != nil {
			return nil, e
		}
		return map[string]any{}, nil // an acknowledgement, also for a terminal task
	case "tasks/update":
		return s.updateTask(ctx, p.TaskID, m.Params) // tasks_input.go
	}
	return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method not found: %s", m.Method)
}

// detailedTask is the extension's tasks/get result: the task, with its
// result or error inline once terminal.
func detailedTask(t *pb.Task) map[string]any {
	m := task2026(t)
	switch t.GetStatus() {
	case pb.TaskStatus_TASK_STATUS_COMPLETED:
		m["result"] = json.RawMessage(t.GetResultJson())
	case pb.TaskStatus_TASK_STATUS_FAILED:
		m["error"] = map[string]any{"code": jsonrpc.CodeInternalError, "message": taskMessage(t)}
	case pb.TaskStatus_TASK_STATUS_INPUT_REQUIRED:
		m["inputRequests"] = inputRequests(t)
	}
	return m
}

func (s *session) getTask(ctx context.Context, id string, withResult bool) (*pb.Task, *jsonrpc.Error) {
	if id == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "taskId is required")
	}
	ctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	got, err := s.g.coord.GetTask(ctx, &pb.GetTaskRequest{TaskId: id, Principal: s.principal, WithResult: withResult})
	if err != nil {
		return nil, taskError(err, id)
	}
	return got.GetTask(), nil
}

func taskError(err error, id string) *jsonrpc.Error {
	if client.Is(err, client.ErrUnknownTask) {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "no task %s (it may have expired)", id)
	}
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot reach the task store: %s", status.Convert(err).Message())
}

// taskResult answers 2025-11-25's tasks/result: it waits until the task is
// terminal, then returns what the tools/call would have returned, tagged
// with the task.
func (s *session) taskResult(ctx context.Context, id string) (any, *jsonrpc.Error) {
	if id == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "taskId is required")
	}
	ctx, cancel := context.WithTimeout(ctx, waitTaskTimeout)
	defer cancel()
	got, err := s.g.coord.WaitTask(ctx, &pb.WaitTaskRequest{TaskId: id, Principal: s.principal})
	if err != nil {
		return nil, taskError(err, id)
	}
	t := got.GetTask()
	related := map[string]any{mcpspec.MetaRelatedTask: map[string]any{"taskId": id}}
	switch t.GetStatus() {
	case pb.TaskStatus_TASK_STATUS_COMPLETED:
		var r map[string]any
		if json.Unmarshal(t.GetResultJson(), &r) != nil || r == nil {
			r = map[string]any{"content": []any{}}
		}
		meta, _ := r["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta[mcpspec.MetaRelatedTask] = related[mcpspec.MetaRelatedTask]
		r["_meta"] = meta
		return r, nil
	case pb.TaskStatus_TASK_STATUS_FAILED:
		// A failed call answers with the tool's error result.
		r := toolError("%s", taskMessage(t))
		r["_meta"] = related
		return r, nil
	default: // cancelled
		data, _ := json.Marshal(map[string]any{"_meta": related})
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task was cancelled: " + taskMessage(t), Data: data}
	}
}

// listTasks answers 2025-11-25's tasks/list: the principal's own tasks.
func (s *session) listTasks(ctx context.Context, cursor string) (any, *jsonrpc.Error) {
	ctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	got, err := s.g.coord.ListTasks(ctx, &pb.ListTasksRequest{Principal: s.principal, PageToken: cursor})
	if err != nil {
		if client.Is(err, client.ErrInvalidArgument) {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid cursor")
		}
		return nil, taskError(err, "")
	}
	tasks := make([]any, 0, len(got.GetTasks()))
	for _, t := range got.GetTasks() {
		tasks = append(tasks, task2025(t))
	}
	out := map[string]any{"tasks": tasks}
	if next := got.GetNextPageToken(); next != "" {
		out["nextCursor"] = next
	}
	return out, nil
}

// cancelTask cancels one of the principal's tasks; the task is cancelled
// in etcd before this returns. It says whether this cancel won.
func (s *session) cancelTask(ctx context.Context, id string) (*pb.Task, bool, *jsonrpc.Error) {
	if id == "" {
		return nil, false, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "taskId is required")
	}
	ctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	got, err := s.g.coord.CancelTask(ctx, &pb.CancelTaskRequest{TaskId: id, Principal: s.principal, Reason: "tasks/cancel"})
	if err != nil {
		return nil, false, taskError(err, id)
	}
	if got.GetCancelled() {
		s.g.metrics.cancel(cancelWon)
		s.notifyTaskStatus(got.GetTask())
	}
	return got.GetTask(), got.GetCancelled(), nil
}

// notifyTaskStatus tells a 2025-era client that can hear it a task's new
// status.
func (s *session) notifyTaskStatus(t *pb.Task) {
	if !s.speaks2026() {
		s.notify(jsonrpc.Notification("notifications/tasks/status", task2025(t)))
	}
}
