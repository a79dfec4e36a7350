package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// notifications/tasks on 2026-07-28 listens (the tasks extension). A
// listen may name task ids; the gateway grants those that are the
// caller's own, and sends each one's DetailedTask (what tasks/get would
// answer) at once after the acknowledgement, then again each time its
// status changes, until it is terminal. The coordinator follows the
// task's record in etcd (WatchTask), so a change made through any
// replica is heard. A listen naming tasks must declare the extension in
// its client capabilities, as the extension asks (-32021 otherwise).

// listenTasksAllowed refuses a listen that names tasks without declaring
// the tasks extension.
func listenTasksAllowed(lr *listenRequest, params *inParams) *jsonrpc.Error {
	if len(lr.tasks) == 0 || optedIn2026(params) {
		return nil
	}
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{mcpspec.ExtensionTasks: map[string]any{}}}})
	return &jsonrpc.Error{Code: mcpspec.CodeMissingRequiredClientCapability, Message: "Missing required client capability: taskIds on subscriptions/listen need the " + mcpspec.ExtensionTasks + " extension", Data: data}
}

// knownTasks are the ids among ids that name the principal's tasks.
func (s *session) knownTasks(ctx context.Context, ids []string) map[string]bool {
	known := map[string]bool{}
	for _, id := range ids {
		if _, e := s.getTask(ctx, id, false); e == nil {
			known[id] = true
		}
	}
	return known
}

// followTasks sends notifications/tasks for each task on out until the
// task is terminal or stop is called; stop waits for the followers.
func (s *session) followTasks(ctx context.Context, tasks map[string]bool, out sink) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for id := range tasks {
		wg.Go(func() { s.followTask(ctx, id, out) })
	}
	return func() { cancel(); wg.Wait() }
}

// followTask follows one task, again after a lost watch (another
// coordinator replica answers), never sending the same status twice.
func (s *session) followTask(ctx context.Context, id string, out sink) {
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	var last *pb.Task
	for ctx.Err() == nil {
		done, err := s.watchTask(ctx, id, out, &last)
		if done || ctx.Err() != nil {
			return
		}
		if client.Is(err, client.ErrUnknownTask) {
			return // expired: nothing more will happen to it
		}
		s.g.log.Debug("a listen's task watch ended; retrying", "task", id, "err", err)
		retry.Wait(ctx)
	}
}

// watchTask relays one WatchTask stream; done once the task is terminal.
func (s *session) watchTask(ctx context.Context, id string, out sink, last **pb.Task) (done bool, err error) {
	stream, err := s.g.coord.WatchTask(ctx, &pb.WatchTaskRequest{TaskId: id, Principal: s.principal})
	if err != nil {
		return false, err
	}
	for {
		got, err := stream.Recv()
		if err != nil {
			return false, err
		}
		t := got.GetTask()
		if p := *last; p == nil || p.GetStatus() != t.GetStatus() || p.GetStatusMessage() != t.GetStatusMessage() {
			out.send(jsonrpc.Notification(notifyTasks, detailedTask(t)))
			*last = t
		}
		if terminalTask(t.GetStatus()) {
			return true, nil
		}
	}
}

func terminalTask(st pb.TaskStatus) bool {
	return st == pb.TaskStatus_TASK_STATUS_COMPLETED || st == pb.TaskStatus_TASK_STATUS_FAILED || st == pb.TaskStatus_TASK_STATUS_CANCELLED
}
