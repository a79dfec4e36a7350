package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// MCP tasks, in both wire forms, on the coordinator's one state machine:
//
//   - 2025-11-25: a tools/call with params.task becomes a task and is
//     answered with CreateTaskResult ({task: Task}) once the task is in
//     etcd; tasks/get, tasks/result (blocks until terminal), tasks/list and
//     tasks/cancel (-32602 on a terminal task) work from any replica, and
//     notifications/tasks/status reach the session that created the task,
//     when it can hear them.
//   - 2026-07-28, the io.modelcontextprotocol/tasks extension: a request
//     that declares the extension in its client capabilities gets a flat
//     CreateTaskResult (resultType "task") for a tool that supports tasks;
//     tasks/get inlines the result or error; tasks/cancel is an
//     acknowledgement; tasks/result and tasks/list are -32601.
//
// Tasks belong to the principal, not to a session or connection: they
// outlive both, and the gateway that created them. The creating gateway
// starts the task's call on its worker and follows the stream while it
// lives, only to tell its client of the status; the worker keeps running
// the task if the stream goes, and the result is read from the
// coordinator.

// Task support of a tool (execution.taskSupport).
const (
	taskForbidden = "forbidden"
	taskOptional  = "optional"
	taskRequired  = "required"
)

// waitTaskTimeout bounds one tasks/result wait; a client may ask again.
const waitTaskTimeout = 10 * time.Minute

// taskRequest is what a tools/call says about running as a task.
type taskRequest struct {
	Task *struct {
		TTL *float64 `json:"ttl"`
	} `json:"task"`
}

// taskSupport is the tool's execution.taskSupport; "" if no worker offers
// it. deferred says the tool's handler decides when its call becomes a
// task (Tool.defer_task, tasks_start.go).
func (g *Gateway) taskSupport(ctx context.Context, name string) (support string, deferred bool) {
	t := g.knownTool(ctx, name)
	if t == nil {
		return "", false
	}
	if ts := t.GetTaskSupport(); ts == taskOptional || ts == taskRequired {
		return ts, t.GetDeferTask()
	}
	return taskForbidden, false
}

// optedIn2026 says whether a 2026-07-28 request declares the tasks
// extension in its client capabilities.
func optedIn2026(params *inParams) bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	raw, ok := envelopeOf(params).caps["extensions"]
	if !ok || json.Unmarshal([]byte(`{"extensions":`+string(raw)+`}`), &caps) != nil {
		return false
	}
	_, ok = caps.Extensions[mcpspec.ExtensionTasks]
	return ok
}

// maybeTask handles a tools/call that runs as a task, or that must and
// does not; it reports whether it answered the request.
func (s *session) maybeTask(ctx context.Context, m *jsonrpc.Message, p *routed, reply sink) bool {
	support, deferred := s.g.taskSupport(ctx, p.target)
	if support == "" {
		return false // an unknown tool: the call answers it
	}
	var tr taskRequest
	if raw := paramsOf(m).Task; len(raw) > 0 {
		json.Unmarshal(raw, &tr.Task)
	}
	var asTask bool
	if s.speaks2026() {
		// The server decides; the client's 2025 task hint (params.task) is ignored.
		asTask = support != taskForbidden && optedIn2026(paramsOf(m))
		if support == taskRequired && !asTask {
			data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{mcpspec.ExtensionTasks: map[string]any{}}}})
			reply.send(jsonrpc.ErrorResponse(m.ID, true, &jsonrpc.Error{
				Code:    mcpspec.CodeMissingRequiredClientCapability,
				Message: "Missing required client capability: tool " + p.target + " runs only as a task, which needs the " + mcpspec.ExtensionTasks + " extension",
				Data:    data,
			}))
			return true
		}
		if asTask && deferred {
			// An ordinary call until its handler asks to become a task,
			// once its input_required rounds are resolved (tasks_start.go).
			return false
		}
	} else {
		asTask = tr.Task != nil
		switch {
		case asTask && support == taskForbidden:
			reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "tool %s does not run as a task (execution.taskSupport is forbidden)", p.target)))
			return true
		case !asTask && support == taskRequired:
			reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "tool %s runs only as a task: call it with params.task", p.target)))
			return true
		}
	}
	if !asTask {
		return false
	}
	var ttl time.Duration
	if tr.Task != nil && tr.Task.TTL != nil && *tr.Task.TTL > 0 {
		ttl = time.Duration(*tr.Task.TTL) * time.Millisecond
	}
	s.createTask(ctx, m, p, ttl, reply)
	return true
}

// createTask creates the task, answers CreateTaskResult once it is in
// etcd, and starts its call on the worker.
func (s *session) createTask(ctx context.Context, m *jsonrpc.Message, p *routed, ttl time.Duration, reply sink) {
	exec := s.taskExecute(p, identityFrom(ctx).Scopes, taskRun{caps: s.taskCapabilities(paramsOf(m))})
	created, e := s.newTask(requestID(m.ID), p, ttl, exec)
	if e != nil {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, e))
		s.g.metrics.call(p.target, outcomeRejected)
		return
	}
	// The client hears of the task once its worker holds it: a gateway
	// that dies after answering leaves a task that runs, not one nobody
	// started. A worker that does not answer in time leaves the answer
	// to go out anyway; the task is then its worker's or the janitor's.
	admitted := s.startTaskRun(p, created, exec)
	select {
	case <-admitted:
	case <-time.After(cancelTimeout): // a bound, not a wait for anything
	}
	if s.speaks2026() {
		reply.send(jsonrpc.Response(m.ID, createTaskResult2026(created.GetTask())))
	} else {
		reply.send(jsonrpc.Response(m.ID, map[string]any{"task": task2025(created.GetTask())}))
	}
}

// newTask creates a task for the tool call p, durably, in etcd, keeping
// its run, exec, for its worker to start should this gateway be lost
// before it does.
func (s *session) newTask(id *pb.RequestId, p *routed, ttl time.Duration, exec *pb.ExecuteRequest) (*pb.CreateTaskResponse, *jsonrpc.Error) {
	g := s.g
	cctx, cancel := context.WithTimeout(g.base, cancelTimeout)
	defer cancel()
	req := &pb.CreateTaskRequest{
		Key: &pb.CallKey{Scope: s.scope, RequestId: id}, Tool: p.target,
		Principal: s.principal, Gateway: g.opts.Name, Run: exec,
	}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	created, err := g.coord.CreateTask(cctx, req)
	if err != nil {
		return nil, createTaskError(err, p.target)
	}
	return created, nil
}

// taskRun is what a task's call gets besides the tool and arguments:
// for a 2026-07-28 task, the client's capabilities (what the task may
// ask its client, through inputRequests) and the answers its client gave
// before the task existed (tasks_start.go).
type taskRun struct {
	caps   json.RawMessage
	inputs map[string][]byte
}

// taskCapabilities are the client capabilities a 2026-07-28 task may ask
// its client by: none for a 2025-11-25 task, whose client would be asked
// on tasks/result, which relays no requests.
func (s *session) taskCapabilities(params *inParams) json.RawMessage {
	if !s.speaks2026() {
		return nil
	}
	return s.capabilitiesFor(params)
}

// taskExecute is the Execute of the task's call, but for what the task's
// creation decides: its id, fence, worker and deadline.
func (s *session) taskExecute(p *routed, scopes []string, run taskRun) *pb.ExecuteRequest {
	return &pb.ExecuteRequest{
		Tool: p.target, ArgumentsJson: p.arguments, Principal: s.principal, Scopes: scopes, Task: true,
		ClientCapabilitiesJson: run.caps, Scope: s.scope, InputResponses: run.inputs,
	}
}

// startTaskRun starts the task's call, exec, on its worker, under the
// gateway. The channel closes once the worker holds the task, or the
// attempt to start it ended.
func (s *session) startTaskRun(p *routed, created *pb.CreateTaskResponse, exec *pb.ExecuteRequest) <-chan struct{} {
	token := p.token
	if len(token) > 0 && token[0] != '"' && token[0] != '-' && (token[0] < '0' || token[0] > '9') {
		token = nil // a progress token is a string or a number
	}
	admitted := make(chan struct{})
	once := sync.OnceFunc(func() { close(admitted) })
	if !s.g.startTask(func(base context.Context) {
		defer once()
		s.runTask(base, created, token, exec, once)
	}) {
		s.g.failTask(created.GetTask(), "the gateway shut down before the task started")
		once()
	}
	return admitted
}

func createTaskError(err error, tool string) *jsonrpc.Error {
	switch client.Kind(err) {
	case client.ErrUnknownTool:
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "unknown tool: %s", tool)
	case client.ErrTooManyTasks:
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "too many tasks: %s", status.Convert(err).Message())
	case client.ErrNoCapacity:
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "every worker offering %s is busy; try again shortly", tool)
	case client.ErrSessionClosed:
		return jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the session was closed; initialize a new one")
	}
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "the task could not be created: %s", status.Convert(err).Message())
}

// startTask runs f under the gateway, which waits for it at shutdown; it
// reports false if the gateway is shutting down.
func (g *Gateway) startTask(f func(context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.taskRuns.Go(func() { f(g.base) })
	return true
}

// runTask starts the task's call on its worker and follows the stream
// while it lasts. The worker keeps running the task when the stream ends
// (this gateway shutting down, say). A worker that refuses the call fails
// the task; one that opened it already (itself, finding this gateway
// late: tasks_runs.go in the coordinator) keeps it; a stream lost
// otherwise leaves the task to its worker, or, if the worker is gone, to
// the coordinator's janitor.
func (s *session) runTask(ctx context.Context, created *pb.CreateTaskResponse, token json.RawMessage, exec *pb.ExecuteRequest, admitted func()) {
	g := s.g
	t := created.GetTask()
	wc, err := g.workerClient(created.GetWorkerAddress())
	if err != nil {
		g.failTask(t, "the task's worker could not be reached: "+err.Error())
		return
	}
	ctx, stop := context.WithDeadline(ctx, created.GetDeadline().AsTime().Add(g.opts.ExecuteGrace))
	defer stop()
	req := proto.CloneOf(exec)
	req.CallId, req.Fence, req.Worker = t.GetTaskId(), t.GetFence(), t.GetWorker()
	req.Deadline, req.Progress = created.GetDeadline(), len(token) > 0
	stream, err := wc.Execute(ctx, req)
	if err == nil {
		stream.Header() // the worker holds the task (or the stream failed: drain says how)
		admitted()
		err = drain(stream, func(pr *pb.Progress) { s.taskProgress(t.GetTaskId(), token, pr) })
	}
	switch status.Code(err) {
	case codes.OK:
		s.notifyTask(t.GetTaskId())
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.ResourceExhausted:
		g.failTask(t, "the worker refused the task: "+status.Convert(err).Message())
		s.notifyTask(t.GetTaskId())
	case codes.AlreadyExists:
		g.log.Info("the task's worker opened its run before this gateway did; it runs there", "task", t.GetTaskId())
	default:
		if ctx.Err() == nil {
			g.log.Info("lost the stream of a task; its worker keeps running it", "task", t.GetTaskId(), "err", err)
		}
	}
}

// drain reads a task's stream to its end, passing on its progress; nil
// when it ended with an outcome.
func drain(stream pb.WorkerService_ExecuteClient, progress func(*pb.Progress)) error {
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return status.Error(codes.Unknown, "the worker ended the task's stream without an outcome")
		}
		if err != nil {
			return err
		}
		switch e := ev.GetEvent().(type) {
		case *pb.ExecuteResponse_Progress:
			progress(e.Progress)
		case *pb.ExecuteResponse_Result, *pb.ExecuteResponse_Failed, *pb.ExecuteResponse_Cancelled:
			return nil
		}
	}
}

// failTask fails a task whose call never started on its worker.
func (g *Gateway) failTask(t *pb.Task, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(g.base), cancelTimeout)
	defer cancel()
	_, err := g.coord.Fail(ctx, &pb.FailRequest{
		Call:      &pb.CallRef{CallId: t.GetTaskId(), Fence: t.GetFence(), Worker: t.GetWorker()},
		Initiator: pb.Initiator_INITIATOR_WORKER_LOST, Reason: reason,
	})
	if err != nil {
		g.log.Warn("cannot fail a task that did not start; the janitor will", "task", t.GetTaskId(), "err", err)
	}
}

// notifyTask tells the session's client the task's status, if the client
// can hear notifications (2025-era sessions with a stream open).
func (s *session) notifyTask(id string) {
	if s.speaks2026() {
		return // notifications/tasks go on listen streams, which do not carry tasks yet
	}
	ctx, cancel := context.WithTimeout(s.g.base, cancelTimeout)
	defer cancel()
	got, err := s.g.coord.GetTask(ctx, &pb.GetTaskRequest{TaskId: id, Principal: s.principal})
	if err != nil {
		return
	}
	s.notifyTaskStatus(got.GetTask())
}

var taskStatusNames = map[pb.TaskStatus]string{
	pb.TaskStatus_TASK_STATUS_WORKING:        "working",
	pb.TaskStatus_TASK_STATUS_INPUT_REQUIRED: "input_required",
	pb.TaskStatus_TASK_STATUS_COMPLETED:      "completed",
	pb.TaskStatus_TASK_STATUS_FAILED:         "failed",
	pb.TaskStatus_TASK_STATUS_CANCELLED:      "cancelled",
}

func taskFields(t *pb.Task) map[string]any {
	m := map[string]any{
		"taskId":        t.GetTaskId(),
		"status":        taskStatusNames[t.GetStatus()],
		"createdAt":     t.GetCreatedAt().AsTime().UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt": t.GetLastUpdatedAt().AsTime().UTC().Format(time.RFC3339Nano),
	}
	if msg := taskMessage(t); msg != "" {
		m["statusMessage"] = msg
	}
	return m
}

// taskMessage says why a task failed or was cancelled.
func taskMessage(t *pb.Task) string {
	switch t.GetStatus() {
	case pb.TaskStatus_TASK_STATUS_CANCELLED:
		if t.GetInitiator() == pb.Initiator_INITIATOR_CLIENT {
			return "The task was cancelled by request."
		}
		return cancelledMessage(t.GetInitiator(), t.GetStatusMessage())
	case pb.TaskStatus_TASK_STATUS_FAILED:
		return "the tool failed: " + t.GetStatusMessage()
	}
	return ""
}

// task2025 is a Task in 2025-11-25's form.
func task2025(t *pb.Task) map[string]any {
	m := taskFields(t)
	m["ttl"] = t.GetTtl().AsDuration().Milliseconds()
	m["pollInterval"] = t.GetPollInterval().AsDuration().Milliseconds()
	return m
}

// task2026 is a Task in the 2026-07-28 extension's form.
func task2026(t *pb.Task) map[string]any {
	m := taskFields(t)
	m["ttlMs"] = t.GetTtl().AsDuration().Milliseconds()
	m["pollIntervalMs"] = max(t.GetPollInterval().AsDuration().Milliseconds(), 1)
	return m
}

func createTaskResult2026(t *pb.Task) map[string]any {
	m := task2026(t)
	m["resultType"] = "task"
	return m
}

// withTasks adds 2025-11-25's tasks capability.
func withTasks(caps map[string]any) map[string]any {
	caps["tasks"] = map[string]any{
		"list": map[string]any{}, "cancel": map[string]any{},
		"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}},
	}
	return caps
}

// withTaskExtension adds the 2026-07-28 tasks extension.
func withTaskExtension(caps map[string]any) map[string]any {
	caps["extensions"] = map[string]any{mcpspec.ExtensionTasks: map[string]any{}}
	return caps
}

// toolExecution is a tool's execution as tools/list shows it.
type toolExecution struct {
	TaskSupport string `json:"taskSupport"`
}

func execution(t *pb.Tool) *toolExecution {
	if ts := t.GetTaskSupport(); ts == taskOptional || ts == taskRequired {
		return &toolExecution{TaskSupport: ts}
	}
	return nil
}

// taskProgress relays a task's progress to a 2025-era client that gave a
// progress token and can hear notifications: the token stays valid for
// the task's life. Progress coalesces to the latest, and none follows the
// task's end (the stream's outcome ends drain).
func (s *session) taskProgress(id string, token json.RawMessage, p *pb.Progress) {
	if len(token) == 0 || s.speaks2026() {
		return
	}
	params := map[string]any{"progressToken": token, "progress": p.GetProgress(),
		"_meta": map[string]any{mcpspec.MetaRelatedTask: map[string]any{"taskId": id}}}
	if p.GetTotal() > 0 {
		params["total"] = p.GetTotal()
	}
	if p.GetMessage() != "" {
		params["message"] = p.GetMessage()
	}
	s.mu.Lock()
	k := s.notifier
	s.mu.Unlock()
	if k != nil {
		k.sendLatest("task-progress/"+id, jsonrpc.Notification("notifications/progress", params))
	}
}
