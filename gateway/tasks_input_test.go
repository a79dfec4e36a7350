package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// 2026-07-28 tasks that wait for their client's input, a call that
// becomes a task after its input_required rounds, and MRTR on a request
// other than tools/call, each against the real system: etcd, a
// coordinator, a worker over gRPC and gateways over HTTP.

// taskCaps are the capabilities of a client that can be asked for input
// and takes tasks.
var taskCaps = map[string]any{"elicitation": map[string]any{}, "extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}

// call26 sends one 2026-07-28 request declaring caps and returns its
// answer: the result, or the error code.
func call26(t *testing.T, url string, id int, method, name string, params map[string]any) (map[string]any, int) {
	t.Helper()
	p := map[string]any{"_meta": envelope(taskCaps)}
	for k, v := range params {
		p[k] = v
	}
	_, msgs := post26(t, url, request(id, method, p), headers2026(method, name))
	if len(msgs) == 0 {
		t.Fatalf("%s: no answer", method)
	}
	last := msgs[len(msgs)-1]
	if last.Error != nil {
		return nil, last.Error.Code
	}
	var r map[string]any
	if err := json.Unmarshal(last.Result, &r); err != nil {
		t.Fatalf("%s: result %s", method, last.Result)
	}
	return r, 0
}

// getTask is tasks/get's result.
func getTask(t *testing.T, url, id string) map[string]any {
	t.Helper()
	r, code := call26(t, url, 900, "tasks/get", id, map[string]any{"taskId": id})
	if code != 0 {
		t.Fatalf("tasks/get %s: error %d", id, code)
	}
	return r
}

// ack checks a tasks/update or tasks/cancel acknowledgement: an empty
// result that says it is complete.
func ack(t *testing.T, r map[string]any, code int) {
	t.Helper()
	if code != 0 || r["resultType"] != "complete" || len(r) != 1 {
		t.Fatalf("want an empty acknowledgement, got %v (error %d)", r, code)
	}
}

// taskInputStack starts the system with the fixture tools and extra, and
// two gateways sharing a state key.
func taskInputStack(t *testing.T, extra func(*worker.Worker)) (*etcdtest.Cluster, []string) {
	t.Helper()
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "fixtures"}, func(w *worker.Worker) {
		demo.Register(w)
		demo.RegisterFixtures(w)
		if extra != nil {
			extra(w)
		}
	})
	conn := coord.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	waitFor(t, "the fixture tools", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) > 10
	})
	key := []byte(strings.Repeat("k", 32))
	_, a := testcluster.StartGateway(t, conn, gateway.Options{StateKey: key})
	_, b := testcluster.StartGateway(t, conn, gateway.Options{StateKey: key})
	return cl, []string{a, b}
}

// A task that asks its client two things at once, created on one replica
// and driven through the other: tasks/get shows both requests inline;
// answering one (with a key never asked beside it) leaves exactly the
// other outstanding, at once; answering a request again changes nothing;
// answering the last resumes the task, whose result has both answers.
func TestTaskInputRequiredPartial(t *testing.T) {
	_, urls := taskInputStack(t, nil)
	created, code := call26(t, urls[0], 1, "tools/call", "multi_input", map[string]any{"name": "multi_input", "arguments": map[string]any{}})
	if code != 0 || created["resultType"] != "task" {
		t.Fatalf("multi_input: %v (error %d)", created, code)
	}
	id := created["taskId"].(string)
	var task map[string]any
	waitFor(t, "the task to wait on two requests", func() bool {
		task = getTask(t, urls[1], id)
		reqs, _ := task["inputRequests"].(map[string]any)
		return task["status"] == "input_required" && len(reqs) == 2
	})
	reqs := task["inputRequests"].(map[string]any)
	name, _ := reqs["name"].(map[string]any)
	if name["method"] != "elicitation/create" || name["params"].(map[string]any)["message"] != "What is your name?" {
		t.Fatalf("inputRequests: %v", reqs)
	}
	if _, ok := task["requestState"]; ok {
		t.Fatalf("tasks/get carries requestState: %v", task)
	}

	r, code := call26(t, urls[1], 2, "tasks/update", id, map[string]any{"taskId": id, "inputResponses": map[string]any{
		"confirm":    map[string]any{"action": "accept", "content": map[string]any{"confirm": true}},
		"never-sent": map[string]any{"action": "accept", "content": map[string]any{}},
	}})
	ack(t, r, code)
	task = getTask(t, urls[0], id)
	if reqs, _ := task["inputRequests"].(map[string]any); task["status"] != "input_required" || len(reqs) != 1 || reqs["name"] == nil {
		t.Fatalf("after answering one of two: %v", task)
	}
	r, code = call26(t, urls[0], 3, "tasks/update", id, map[string]any{"taskId": id, "inputResponses": map[string]any{
		"confirm": map[string]any{"action": "decline"},
	}})
	ack(t, r, code)
	if _, code := call26(t, urls[0], 4, "tasks/update", id, map[string]any{"taskId": id, "inputResponses": map[string]any{"name": 5}}); code != -32602 {
		t.Fatalf("an answer that is no result object: error %d, want -32602", code)
	}
	r, code = call26(t, urls[1], 5, "tasks/update", id, map[string]any{"taskId": id, "inputResponses": map[string]any{
		"name": map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}},
	}})
	ack(t, r, code)
	waitFor(t, "the task to complete", func() bool { task = getTask(t, urls[1], id); return task["status"] == "completed" })
	text := task["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
	if !strings.Contains(text, `"Ada"`) || !strings.Contains(text, `"confirm":true`) || strings.Contains(text, "decline") {
		t.Fatalf("the task's result does not carry the first answers given: %q", text)
	}
	if _, ok := task["inputRequests"]; ok {
		t.Fatalf("a completed task lists inputRequests: %v", task)
	}
	if _, code := call26(t, urls[0], 6, "tasks/update", "no-such-task", map[string]any{"taskId": "no-such-task", "inputResponses": map[string]any{}}); code != -32602 {
		t.Fatalf("tasks/update of an unknown task: error %d, want -32602", code)
	}
}

// askOnce is a task tool that asks its client once and completes as soon
// as it has the answer; it notes which calls got an answer.
type askOnce struct {
	mu       sync.Mutex
	answered map[string]string
	returned chan string
}

func (a *askOnce) register(w *worker.Worker) {
	w.Handle(worker.Tool{Name: "ask_once", InputSchema: json.RawMessage(`{"type":"object"}`), TaskSupport: worker.TaskOptional},
		func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			defer func() { a.returned <- c.ID }()
			r, err := c.Elicit(worker.WithInputKey(ctx, "go"), &mcp.ElicitParams{Message: "Go?", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}}}`)})
			if err != nil {
				return nil, err
			}
			a.mu.Lock()
			a.answered[c.ID] = fmt.Sprint(r.Content["word"])
			a.mu.Unlock()
			return worker.Text("answered " + fmt.Sprint(r.Content["word"])), nil
		})
}

func (a *askOnce) got(id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.answered[id]
	return w, ok
}

// tasks/cancel races tasks/update on a task waiting for its answer, sent
// to different replicas at once, many times. The coordinator orders them:
// either the cancel came first, and the update took nothing (its answer
// is not in the task's record, the handler never had it); or the update
// took the answer first, and then exactly one of the task's completion
// and the cancel won. Whichever won is the task's one decision, it never
// changes, and a cancelled task has no result, stored or shown.
func TestTaskCancelVersusUpdate(t *testing.T) {
	tool := &askOnce{answered: map[string]string{}, returned: make(chan string, 1)}
	cl, urls := taskInputStack(t, tool.register)
	const rounds = 40
	tally := map[string]int{}
	for i := range rounds {
		created, code := call26(t, urls[0], 10*i+1, "tools/call", "ask_once", map[string]any{"name": "ask_once", "arguments": map[string]any{}})
		if code != 0 || created["resultType"] != "task" {
			t.Fatalf("ask_once: %v (error %d)", created, code)
		}
		id := created["taskId"].(string)
		waitFor(t, "the task to wait for input", func() bool { return getTask(t, urls[0], id)["status"] == "input_required" })
		word := fmt.Sprintf("w%d", i)
		var wg sync.WaitGroup
		wg.Go(func() {
			r, code := call26(t, urls[0], 10*i+2, "tasks/cancel", id, map[string]any{"taskId": id})
			ack(t, r, code)
		})
		wg.Go(func() {
			r, code := call26(t, urls[1], 10*i+3, "tasks/update", id, map[string]any{"taskId": id, "inputResponses": map[string]any{
				"go": map[string]any{"action": "accept", "content": map[string]any{"word": word}},
			}})
			ack(t, r, code)
		})
		wg.Wait()
		if got := <-tool.returned; got != id {
			t.Fatalf("handler of %s returned, want %s", got, id)
		}
		var status string
		waitFor(t, "the task's end", func() bool {
			status, _ = getTask(t, urls[1], id)["status"].(string)
			return status == "completed" || status == "cancelled"
		})
		task := getTask(t, urls[0], id)
		answer, had := tool.got(id)
		taken := answerTaken(t, cl, id)
		decisions := decisionsOf(testcluster.Audits(t, cl.Client())[id])
		switch {
		case task["status"] != status:
			t.Fatalf("task %s read %s, then %v", id, status, task["status"])
		case len(decisions) != 1 || decisions[0] != status:
			t.Fatalf("task %s is %s with decisions %v", id, status, decisions)
		case had && (!taken || answer != word):
			t.Fatalf("task %s: the handler had answer %q the update did not take (taken %v)", id, answer, taken)
		case !taken && status != "cancelled":
			t.Fatalf("task %s is %s though the update took nothing", id, status)
		case status == "completed" && !had:
			t.Fatalf("task %s completed without its answer", id)
		case status == "cancelled" && (task["result"] != nil || hasStoredResult(t, cl, id)):
			t.Fatalf("cancelled task %s has a result: %v", id, task)
		}
		switch {
		case !taken:
			tally["cancel first; update took nothing"]++
		case status == "completed":
			tally["update first; completion won"]++
		default:
			tally["update first; cancel won"]++
		}
	}
	t.Logf("%d races: %v", rounds, tally)
}

// decisionsOf are the outcomes of a call's decisions (not cancel_lost).
func decisionsOf(as []*coordinator.AuditRecord) []string {
	var out []string
	for _, a := range as {
		if a.Outcome != "cancel_lost" {
			out = append(out, a.Outcome)
		}
	}
	return out
}

// answerTaken reads from etcd whether an update took the answer of the
// task's request "go".
func answerTaken(t *testing.T, cl *etcdtest.Cluster, id string) bool {
	t.Helper()
	resp, err := cl.Client().Get(t.Context(), prefix+"calls/"+id)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the task's record: %v", err)
	}
	var rec struct {
		Task struct {
			Used []string `json:"used_keys"`
		} `json:"task"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range rec.Task.Used {
		if k == "go" {
			return true
		}
	}
	return false
}

func hasStoredResult(t *testing.T, cl *etcdtest.Cluster, id string) bool {
	t.Helper()
	resp, err := cl.Client().Get(t.Context(), prefix+"task-results/"+id, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count > 0
}

// A tool that gathers its input before it becomes a task: its first
// round is input_required on tools/call, with no task; the retry with the
// answer is answered with the task, without requestState; the task's
// result has the answer. A client that cannot take tasks is refused, and
// a forged requestState is refused too.
func TestTaskAfterInputRounds(t *testing.T) {
	_, urls := taskInputStack(t, nil)
	args := map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{}}
	r1, code := call26(t, urls[0], 1, "tools/call", "test_tool_with_task", args)
	if code != 0 || r1["resultType"] != "input_required" || r1["taskId"] != nil {
		t.Fatalf("round 1: %v (error %d)", r1, code)
	}
	state := r1["requestState"].(string)
	answer := map[string]any{"user_name": map[string]any{"action": "accept", "content": map[string]any{"name": "Alice"}}}
	forged := map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{}, "inputResponses": answer, "requestState": state[:len(state)-2] + "AA"}
	if _, code := call26(t, urls[1], 2, "tools/call", "test_tool_with_task", forged); code != -32602 {
		t.Fatalf("a forged requestState: error %d, want -32602", code)
	}
	retry := map[string]any{"name": "test_tool_with_task", "arguments": map[string]any{}, "inputResponses": answer, "requestState": state}
	r2, code := call26(t, urls[1], 3, "tools/call", "test_tool_with_task", retry)
	if code != 0 || r2["resultType"] != "task" || r2["taskId"] == nil || r2["requestState"] != nil || r2["inputRequests"] != nil {
		t.Fatalf("round 2: %v (error %d)", r2, code)
	}
	id := r2["taskId"].(string)
	var task map[string]any
	waitFor(t, "the task to complete", func() bool { task = getTask(t, urls[0], id); return task["status"] == "completed" })
	if text := task["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]; !strings.Contains(fmt.Sprint(text), "Alice") {
		t.Fatalf("the task's result lost the round's answer: %v", text)
	}
	// Without the tasks extension the tool is refused, as it runs only as
	// a task.
	p := map[string]any{"_meta": envelope(map[string]any{"elicitation": map[string]any{}}), "name": "test_tool_with_task", "arguments": map[string]any{}}
	_, msgs := post26(t, urls[0], request(4, "tools/call", p), headers2026("tools/call", "test_tool_with_task"))
	if len(msgs) == 0 || msgs[len(msgs)-1].Error == nil || msgs[len(msgs)-1].Error.Code != -32021 {
		t.Fatalf("a client without tasks: %+v", msgs)
	}
}

// The Go SDK client (2026-07-28) gets a prompt that asks its user for
// context: its elicitation handler answers the input_required round and
// the SDK retries prompts/get with the answer. A requestState of that
// prompt is refused for another prompt.
func TestMRTRPromptGoSDK(t *testing.T) {
	_, urls := taskInputStack(t, nil)
	var w wire
	c := mcp.NewClient(&mcp.Implementation{Name: "gosdk-mrtr", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"context": "asked via " + r.Params.Message}}, nil
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: urls[0], HTTPClient: w.client(), MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	got, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "test_input_required_result_prompt"})
	if err != nil {
		t.Fatal(err)
	}
	if text := got.Messages[0].Content.(*mcp.TextContent).Text; text != "Answer with this context in mind: asked via What context should the prompt use?" {
		t.Fatalf("prompt: %q", text)
	}
	var rounds []string
	asked := map[string]bool{} // ids of the prompts/get requests
	for _, m := range w.snapshot() {
		id := fmt.Sprint(m.body["id"])
		if m.out && m.body["method"] == "prompts/get" {
			asked[id] = true
		}
		if r, ok := m.body["result"].(map[string]any); ok && !m.out && asked[id] {
			rounds = append(rounds, fmt.Sprint(r["resultType"]))
		}
	}
	if len(rounds) != 2 || rounds[0] != "input_required" || rounds[1] != "complete" {
		t.Fatalf("the prompt's rounds on the wire: %v", rounds)
	}

	r1, code := call26(t, urls[1], 1, "prompts/get", "test_input_required_result_prompt", map[string]any{"name": "test_input_required_result_prompt"})
	if code != 0 || r1["resultType"] != "input_required" {
		t.Fatalf("round 1: %v (error %d)", r1, code)
	}
	answer := map[string]any{"user_context": map[string]any{"action": "accept", "content": map[string]any{"context": "c"}}}
	if _, code := call26(t, urls[1], 2, "prompts/get", "test_simple_prompt", map[string]any{"name": "test_simple_prompt", "inputResponses": answer, "requestState": r1["requestState"]}); code != -32602 {
		t.Fatalf("another prompt's requestState: error %d, want -32602", code)
	}
	r2, code := call26(t, urls[0], 3, "prompts/get", "test_input_required_result_prompt", map[string]any{"name": "test_input_required_result_prompt", "inputResponses": answer, "requestState": r1["requestState"]})
	if code != 0 || r2["resultType"] != "complete" || r2["messages"] == nil {
		t.Fatalf("round 2 on the other replica: %v (error %d)", r2, code)
	}
}
