package robustness

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The task workload (issue 21): 2025-11-25 clients, speaking raw JSON-RPC
// over HTTP, create tasks of the fixtures' slow_compute on one gateway and
// poll (tasks/get), wait (tasks/result), list and cancel them through
// either, under the same faults as the calls. Each task belongs to a
// principal of its own; the client keeps one session on each gateway. A
// plan is one of:
//
//   - result: poll a few times, wait for the result, then cancel the
//     terminal task (which must be -32602);
//   - cancel: cancel it at a random moment of its work, read it, read it
//     again once its work would have finished, cancel it again, and ask
//     for its result;
//   - abandon: close the creating session at once (a task outlives it),
//     then wait for the result on the other gateway.
//
// A third of the plans also make a plain tools/call with the same
// arguments, whose result tasks/result must equal. The kill_gateway fault
// creates a task of its own on the gateway it kills (taskprobe.go).

// taskTool is the task tool the workers serve with --fixtures.
const taskTool = "slow_compute"

// taskTTL is what the task clients ask for: the coordinators cap it at
// their longest call timeout (half the retention).
const taskTTL = 5 * time.Second

// taskLoad records the task clients' observations.
type taskLoad struct {
	mu    sync.Mutex
	tasks []*ClientTask
}

func (tl *taskLoad) add(t *ClientTask) {
	tl.mu.Lock()
	tl.tasks = append(tl.tasks, t)
	tl.mu.Unlock()
}

// snapshot returns the tasks recorded; every client that writes them
// has returned by the time it is called.
func (tl *taskLoad) snapshot() []*ClientTask {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]*ClientTask(nil), tl.tasks...)
}

// runTasks runs n task client loops until ctx ends, then waits for them.
func (wl *Workload) runTasks(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(wl.seed), 0x7a5c+uint64(i)))
			for ctx.Err() == nil {
				wl.taskEpisode(ctx, r)
			}
		})
	}
	wg.Wait()
}

// taskClient is one principal's sessions on both gateways.
type taskClient struct {
	wl       *Workload
	sessions [2]*rpcSession
}

func (wl *Workload) newTaskClient(ctx context.Context) (*taskClient, string, error) {
	token, principal := wl.nextPrincipal()
	tc := &taskClient{wl: wl}
	hc := &http.Client{Transport: wl.http}
	for gw := range tc.sessions {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := openRPC(octx, hc, wl.c.MCPURL(gw), token)
		cancel()
		if err != nil {
			tc.close()
			return nil, "", fmt.Errorf("gateway %d: %w", gw, err)
		}
		tc.sessions[gw] = s
	}
	return tc, principal, nil
}

func (tc *taskClient) close() {
	for _, s := range tc.sessions {
		if s != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.close(ctx)
			cancel()
		}
	}
}

// newTask plans a task of slow_compute for seconds.
func (wl *Workload) newTask(principal, kind string, seconds float64, createOn int) *ClientTask {
	seconds = math.Round(seconds*1000) / 1000
	label := fmt.Sprintf("t%d", wl.seq.Add(1))
	return &ClientTask{
		Ref: "task-" + kind + "/" + principal + "/" + label, Principal: principal, Kind: kind, Tool: taskTool,
		Args: map[string]any{"seconds": seconds, "label": label},
		// worker/demo's slowCompute: "computed %s after %gs".
		Expected:  fmt.Sprintf("computed %s after %gs", label, seconds),
		CreatedOn: createOn, ServeOn: -1,
	}
}

func (wl *Workload) taskEpisode(ctx context.Context, r *rand.Rand) {
	tc, principal, err := wl.newTaskClient(ctx)
	if err != nil {
		pace(ctx, 200*time.Millisecond)
		return
	}
	defer tc.close()
	a := r.IntN(2)
	b := 1 - a
	kind := "result"
	switch x := r.IntN(100); {
	case x < 35:
		kind = "cancel"
	case x < 50:
		kind = "abandon"
	}
	t := wl.newTask(principal, kind, 0.1+r.Float64()*1.4, a)
	wl.tasks.add(t)
	var ref sync.WaitGroup
	if r.IntN(3) == 0 {
		ref.Go(func() { t.Reference = tc.plainCall(ctx, a, t.Args) })
	}
	defer ref.Wait()
	if !tc.create(ctx, t) {
		return
	}
	seconds := t.Args["seconds"].(float64)
	workEnd := t.Created.Add(time.Duration(seconds*float64(time.Second)) + 300*time.Millisecond)
	switch kind {
	case "result":
		for range r.IntN(4) {
			pace(ctx, time.Duration(150+r.IntN(350))*time.Millisecond)
			tc.op(ctx, t, r.IntN(2), "tasks/get")
		}
		tc.op(ctx, t, r.IntN(2), "tasks/result")
		if r.IntN(2) == 0 {
			tc.op(ctx, t, b, "tasks/list")
		}
		tc.op(ctx, t, r.IntN(2), "tasks/cancel") // terminal now: -32602
	case "cancel":
		pace(ctx, time.Duration(r.Int64N(int64(seconds*1.3*float64(time.Second))+1)))
		tc.op(ctx, t, b, "tasks/cancel")
		tc.op(ctx, t, a, "tasks/get")
		pace(ctx, time.Until(workEnd))
		tc.op(ctx, t, b, "tasks/get") // still cancelled after its work would have finished
		tc.op(ctx, t, a, "tasks/cancel")
		tc.op(ctx, t, r.IntN(2), "tasks/result")
		tc.op(ctx, t, b, "tasks/list")
	case "abandon":
		tc.sessions[a].close(ctx)
		tc.op(ctx, t, b, "tasks/result")
		tc.op(ctx, t, b, "tasks/get")
	}
}

// create sends the task-augmented tools/call on t's gateway; it reports
// whether CreateTaskResult came.
func (tc *taskClient) create(ctx context.Context, t *ClientTask) bool {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t.CreateSent = time.Now()
	rep, err := tc.sessions[t.CreatedOn].call(octx, "tools/call", map[string]any{
		"name": t.Tool, "arguments": t.Args, "task": map[string]any{"ttl": taskTTL.Milliseconds()},
	})
	switch {
	case err != nil:
		t.CreateErr = err.Error()
		return false
	case rep.Error != nil:
		t.CreateErr = fmt.Sprintf("%d %s", rep.Error.Code, rep.Error.Message)
		return false
	}
	var res struct {
		Task *legacyTaskJSON `json:"task"`
	}
	if json.Unmarshal(rep.Result, &res) != nil || res.Task == nil || res.Task.TaskID == "" {
		t.CreateErr = "not a CreateTaskResult: " + string(rep.Result)
		return false
	}
	t.Created, t.TaskID, t.TTL = time.Now(), res.Task.TaskID, time.Duration(res.Task.TTL)*time.Millisecond
	t.CreatedAt, _ = time.Parse(time.RFC3339Nano, res.Task.CreatedAt)
	return true
}

// legacyTaskJSON is a 2025-11-25 Task.
type legacyTaskJSON struct {
	TaskID    string `json:"taskId"`
	Status    string `json:"status"`
	CreatedAt string `json:"createdAt"`
	TTL       int64  `json:"ttl"`
}

// plainCall makes the ordinary tools/call of the same tool and returns
// its result without _meta; nil if it did not complete (an error, or an
// error result: the gateway's timeout, a lost worker), as then it is no
// reference for what the tool returns.
func (tc *taskClient) plainCall(ctx context.Context, gw int, args map[string]any) json.RawMessage {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := tc.sessions[gw].call(octx, "tools/call", map[string]any{"name": taskTool, "arguments": args})
	if err != nil || rep.Error != nil {
		return nil
	}
	res, _, err := withoutMeta(rep.Result)
	var body struct {
		IsError bool `json:"isError"`
	}
	if err != nil || json.Unmarshal(res, &body) != nil || body.IsError {
		return nil
	}
	return res
}

// op sends one tasks/* request about t to gateway gw and records it.
func (tc *taskClient) op(ctx context.Context, t *ClientTask, gw int, method string) {
	t.Ops = append(t.Ops, tc.wl.taskOp(ctx, tc.sessions[gw], gw, t.TaskID, method))
}

func (wl *Workload) taskOp(ctx context.Context, s *rpcSession, gw int, id, method string) TaskOp {
	timeout := 5 * time.Second
	if method == "tasks/result" {
		timeout = taskTTL + 2*callTimeout // blocks until terminal: within the TTL plus the lease TTL
	}
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	op := TaskOp{Method: method, Gateway: gw, Sent: time.Now()}
	params := map[string]any{"taskId": id}
	if method == "tasks/list" {
		params = map[string]any{}
	}
	rep, err := s.call(octx, method, params)
	op.At = time.Now()
	if err != nil {
		op.Broken = err.Error()
		return op
	}
	if rep.Error != nil {
		op.Code, op.Message = rep.Error.Code, rep.Error.Message
		op.Status = errorStatus(method, op.Code, op.Message)
		return op
	}
	switch method {
	case "tasks/get", "tasks/cancel":
		var task legacyTaskJSON
		if json.Unmarshal(rep.Result, &task) == nil && task.TaskID == id {
			op.Status, op.Won = task.Status, method == "tasks/cancel"
		} else {
			op.Message = "unreadable: " + string(rep.Result)
		}
	case "tasks/list":
		op.Status = listedStatus(rep.Result, id)
	case "tasks/result":
		readResult(&op, rep.Result)
	}
	return op
}

// errorStatus is what a JSON-RPC error says of the task's status.
func errorStatus(method string, code int, msg string) string {
	switch {
	case code == -32602 && strings.HasPrefix(msg, "no task "):
		return tsUnknown
	case code == -32602 && method == "tasks/cancel":
		// "task X is already S; a terminal task cannot be cancelled"
		if _, rest, ok := strings.Cut(msg, " is already "); ok {
			st, _, _ := strings.Cut(rest, ";")
			return st
		}
	case code == -32603 && method == "tasks/result" && strings.HasPrefix(msg, "the task was cancelled"):
		return tsCancelled
	}
	return ""
}

// listedStatus is the status tasks/list gives task id, or "absent".
// The principal holds one task, so its first page is all of them.
func listedStatus(result json.RawMessage, id string) string {
	var page struct {
		Tasks []legacyTaskJSON `json:"tasks"`
	}
	if json.Unmarshal(result, &page) != nil {
		return ""
	}
	for _, t := range page.Tasks {
		if t.TaskID == id {
			return t.Status
		}
	}
	return tsAbsent
}

// readResult fills in a tasks/result answer: the tool's result (its text,
// the task its _meta names) or its error result.
func readResult(op *TaskOp, result json.RawMessage) {
	res, meta, err := withoutMeta(result)
	if err != nil {
		op.Message = "unreadable: " + string(result)
		return
	}
	op.Result = res
	var related struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"io.modelcontextprotocol/related-task"`
	}
	json.Unmarshal(meta, &related)
	op.Related = related.Task.TaskID
	var body struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	json.Unmarshal(res, &body)
	var text []string
	for _, c := range body.Content {
		text = append(text, c.Text)
	}
	op.Text = strings.Join(text, " ")
	op.Status = tsCompleted
	if body.IsError {
		op.Status = tsFailed
	}
}

// withoutMeta splits a result object into the rest and its _meta.
func withoutMeta(result json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(result, &m); err != nil {
		return nil, nil, err
	}
	meta := m["_meta"]
	delete(m, "_meta")
	rest, err := json.Marshal(m)
	return rest, meta, err
}
