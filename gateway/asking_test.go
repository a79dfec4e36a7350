package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// askingStack is etcd, a coordinator, a worker with the tools that ask
// their client, and n gateways.
func askingStack(t *testing.T, n int) ([]*gateway.Gateway, []string) {
	t.Helper()
	return askingStackWith(t, make([]gateway.Options, n)...)
}

// askingStackWith starts one gateway per options.
func askingStackWith(t *testing.T, opts ...gateway.Options) ([]*gateway.Gateway, []string) {
	t.Helper()
	gs, urls, _ := askingStackFull(t, opts...)
	return gs, urls
}

// askingStackFull also returns a coordinator client, for the audit.
func askingStackFull(t *testing.T, opts ...gateway.Options) ([]*gateway.Gateway, []string, pb.CoordinatorServiceClient) {
	t.Helper()
	cl := etcdtest.Single(t)
	coord := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{})
	conn := coord.Conn(t)
	c := pb.NewCoordinatorServiceClient(conn)
	testcluster.StartWorker(t, worker.Options{Coordinator: coord.Addr, Name: "asking"}, registerAskingTools)
	waitFor(t, "the asking tools", func() bool {
		resp, err := c.ListTools(t.Context(), nil)
		return err == nil && len(resp.Tools) >= 3
	})
	var gs []*gateway.Gateway
	var urls []string
	for _, o := range opts {
		g, url := testcluster.StartGateway(t, conn, o)
		gs, urls = append(gs, g), append(urls, url)
	}
	return gs, urls, c
}

// childOutcomes counts the child requests of the audit records of a
// tool's calls, by outcome.
func childOutcomes(t *testing.T, c pb.CoordinatorServiceClient, tool string) (records []*pb.AuditRecord, outcomes map[string]int) {
	t.Helper()
	resp, err := c.ListAudit(t.Context(), &pb.ListAuditRequest{Tool: tool, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	outcomes = map[string]int{}
	for _, r := range resp.GetRecords() {
		for _, ch := range r.GetChildRequests() {
			outcomes[ch.GetMethod()+" "+ch.GetOutcome()]++
		}
	}
	return resp.GetRecords(), outcomes
}

func registerAskingTools(w *worker.Worker) {
	obj := json.RawMessage(`{"type":"object"}`)
	// race asks the client rounds times, each time withdrawing its
	// request after a random moment, and reports which prompts it got
	// answered (and whether each answer was its own) and which it withdrew.
	w.Handle(worker.Tool{Name: "race", InputSchema: obj}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		var a struct {
			Tag    string `json:"tag"`
			Rounds int    `json:"rounds"`
		}
		c.Bind(&a)
		var out raceReport
		for i := range a.Rounds {
			prompt := fmt.Sprintf("%s-%d", a.Tag, i)
			rctx, cancel := context.WithCancel(ctx)
			timer := time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, cancel)
			r, err := c.Sample(rctx, &mcp.CreateMessageParams{MaxTokens: 1,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: prompt}}}})
			timer.Stop()
			cancel()
			switch {
			case err == nil:
				out.Used = append(out.Used, prompt)
				if t, ok := r.Content.(*mcp.TextContent); !ok || t.Text != prompt {
					out.Foreign++
				}
			case errors.Is(err, context.Canceled) && ctx.Err() == nil:
				out.Withdrawn = append(out.Withdrawn, prompt)
			default:
				return nil, err
			}
		}
		b, _ := json.Marshal(out)
		return worker.Text(string(b)), nil
	})
	// hold asks the client to sample and waits until its call ends.
	w.Handle(worker.Tool{Name: "hold_sampling", InputSchema: obj}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		_, err := c.Sample(ctx, &mcp.CreateMessageParams{MaxTokens: 1,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hold"}}}})
		return nil, err
	})
	// ask_all samples, elicits and lists roots, and returns what it got.
	w.Handle(worker.Tool{Name: "ask_all", InputSchema: obj}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		s, err := c.Sample(ctx, &mcp.CreateMessageParams{MaxTokens: 1,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
		if err != nil {
			return worker.Errorf("sample: %v", err), nil
		}
		e, err := c.Elicit(ctx, &mcp.ElicitParams{Message: "name?", RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)})
		if err != nil {
			return worker.Errorf("elicit: %v", err), nil
		}
		r, err := c.Roots(ctx)
		if err != nil {
			return worker.Errorf("roots: %v", err), nil
		}
		b, _ := json.Marshal(map[string]any{"sampled": s.Content, "elicited": e.Content, "roots": r.Roots})
		return worker.Text(string(b)), nil
	})
}

type raceReport struct {
	Used, Withdrawn []string
	Foreign         int // answers that were not to the handler's own request
}

// A handler withdraws its sampling request at a random moment while the
// client answers it at once, thousands of times, in two calls at once on
// one stdio connection. For every request exactly one of two things
// happens: the handler uses the answer, or the gateway sends the client
// notifications/cancelled naming the request; and no answer ever reaches
// a request other than its own.
func TestTowardRaceWithdrawVersusAnswer(t *testing.T) {
	rounds := 1500
	if testing.Short() {
		rounds = 200
	}
	gs, _, coord := askingStackFull(t, gateway.Options{})
	c := serveStdio(t, gs[0])
	c.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"race","version":"0"}}}`)
	c.next(t)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, tag := range []string{"a", "b"} {
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"race","arguments":{"tag":%q,"rounds":%d}}}`, i+1, tag, rounds))
	}
	prompts := map[string]string{} // the gateway's request id -> the prompt asked
	cancelled := map[string]bool{} // prompts the client was told are cancelled
	reports := map[float64]raceReport{}
	timeout := time.After(5 * time.Minute)
	for len(reports) < 2 {
		var m map[string]any
		select {
		case m = <-c.lines:
		case <-timeout:
			t.Fatalf("the calls did not finish; %d requests seen", len(prompts))
		}
		switch {
		case m["method"] == "sampling/createMessage":
			id, _ := m["id"].(string)
			var p struct {
				Messages []struct {
					Content struct{ Text string }
				}
			}
			b, _ := json.Marshal(m["params"])
			json.Unmarshal(b, &p)
			prompt := p.Messages[0].Content.Text
			prompts[id] = prompt
			ans, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{
				"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": prompt}}})
			c.send(t, string(ans))
		case m["method"] == "notifications/cancelled":
			id, _ := m["params"].(map[string]any)["requestId"].(string)
			p, ok := prompts[id]
			if !ok || cancelled[p] {
				t.Fatalf("a cancel for %q, which is no pending request", id)
			}
			cancelled[p] = true
		case m["method"] == nil && m["id"] != nil:
			var rep raceReport
			text := messageText(t, m)
			if err := json.Unmarshal([]byte(text), &rep); err != nil {
				t.Fatalf("call %v: %s", m["id"], text)
			}
			reports[m["id"].(float64)] = rep
		}
	}
	used, withdrawn := 0, 0
	for _, rep := range reports {
		if rep.Foreign != 0 {
			t.Errorf("%d answers reached a request not their own", rep.Foreign)
		}
		for _, p := range rep.Used {
			if cancelled[p] {
				t.Errorf("%s: its answer was used and it was cancelled at the client", p)
			}
		}
		for _, p := range rep.Withdrawn {
			if !cancelled[p] {
				t.Errorf("%s: withdrawn, but the client was never told", p)
			}
		}
		used, withdrawn = used+len(rep.Used), withdrawn+len(rep.Withdrawn)
	}
	if used+withdrawn != 2*rounds || len(cancelled) != withdrawn {
		t.Errorf("%d used + %d withdrawn of %d rounds; %d cancels sent", used, withdrawn, 2*rounds, len(cancelled))
	}
	if used == 0 || withdrawn == 0 {
		t.Errorf("the race was not raced: %d answers used, %d requests withdrawn", used, withdrawn)
	}
	t.Logf("%d rounds: %d answers used, %d requests withdrawn and cancelled at the client", 2*rounds, used, withdrawn)
	// Each call's audit record notes its requests (the first 64) and how
	// each ended, as the handler saw it.
	usedSet := map[string]bool{}
	for _, rep := range reports {
		for _, p := range rep.Used {
			usedSet[p] = true
		}
	}
	recs, _ := childOutcomes(t, coord, "race")
	for _, r := range recs {
		tag := map[string]string{"1": "a", "2": "b"}[string(client.RequestIDJSON(r.GetRequestId()))]
		if len(r.GetChildRequests()) != min(rounds, 64) {
			t.Errorf("call %s notes %d child requests", tag, len(r.GetChildRequests()))
		}
		for _, ch := range r.GetChildRequests() {
			want := "withdrawn"
			if usedSet[fmt.Sprintf("%s-%d", tag, ch.GetSeq()-1)] {
				want = "answered"
			}
			if ch.GetOutcome() != want {
				t.Errorf("call %s request %d: the audit says %s, the handler saw %s", tag, ch.GetSeq(), ch.GetOutcome(), want)
			}
		}
	}
	if len(recs) != 2 {
		t.Errorf("%d audit records of race calls; want 2", len(recs))
	}
}

func messageText(t *testing.T, m map[string]any) string {
	t.Helper()
	r, _ := m["result"].(map[string]any)
	content, _ := r["content"].([]any)
	if len(content) == 0 {
		t.Fatalf("no content in %v", m)
	}
	text, _ := content[0].(map[string]any)["text"].(string)
	return text
}

// The official TypeScript client (sdk 1.32.2) cancels a call while the
// call's sampling request waits at it: within a second the client gets
// notifications/cancelled for the sampling request (its handler's abort
// signal fires), and no response for the call.
func TestTowardTypeScriptCancelWhileSampling(t *testing.T) {
	_, urls, coord := askingStackFull(t, gateway.Options{})
	events := runAsking(t, "--url", urls[0], "--tool", "hold_sampling", "--cancel-on-sampling=true", "--linger-ms", "500")
	aborted := eventOf(events, "sampling_aborted")
	if aborted == nil {
		t.Fatalf("the sampling handler was never aborted: %v", events)
	}
	if ms, _ := aborted["msAfterCancel"].(float64); ms > 1000 {
		t.Errorf("the sampling request was cancelled %v ms after the call", ms)
	}
	t.Logf("the sampling handler's abort signal fired %v ms after the client cancelled the call", aborted["msAfterCancel"])
	if req := eventOf(events, "sampling_request"); req == nil || !strings.HasPrefix(fmt.Sprint(req["requestId"]), "mcpcancel-") {
		t.Errorf("the sampling request did not carry the gateway's own id: %v", req)
	}
	if l := eventOf(events, "linger_done"); l == nil || l["lateResponses"] != 0.0 {
		t.Errorf("a response for the cancelled call reached the client: %v", l)
	}
	if eventOf(events, "result") != nil {
		t.Errorf("the cancelled call was answered")
	}
	recs, got := childOutcomes(t, coord, "hold_sampling")
	if len(recs) != 1 || recs[0].GetOutcome() != "cancelled" || got["sampling/createMessage cancelled"] != 1 {
		t.Errorf("audit %v notes child requests %v; want one cancelled call whose sampling request was cancelled", recs, got)
	}
}

// The same client declares sampling, elicitation and roots; a tool that
// asks all three gets what the client's handlers answered.
func TestTowardTypeScriptAnswers(t *testing.T) {
	_, urls := askingStack(t, 1)
	events := runAsking(t, "--url", urls[0], "--tool", "ask_all", "--sampling-text", "from the model",
		"--elicit-content", `{"name":"Ada"}`, "--roots", `[{"uri":"file:///work","name":"work"}]`)
	res := eventOf(events, "result")
	if res == nil {
		t.Fatalf("no result: %v", events)
	}
	b, _ := json.Marshal(res["result"])
	for _, want := range []string{"from the model", `\"name\":\"Ada\"`, "file:///work"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the result lacks %s: %s", want, b)
		}
	}
}

// runAsking runs asking2025.mjs and returns its events.
func runAsking(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := nodetest.Node(t, ctx, append([]string{"asking2025.mjs", "--no-wire"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Logf("asking2025.mjs: %v\n%s", err, stderr.String())
	}
	var events []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			events = append(events, e)
		}
	}
	return events
}

func eventOf(events []map[string]any, name string) map[string]any {
	for _, e := range events {
		if e["event"] == name {
			return e
		}
	}
	return nil
}

// Two replicas: the call runs on the first; the client POSTs its answer
// to the sampling request to the second, which routes it to the call's
// worker, and the call completes with it.
func TestTowardAnswerThroughAnotherReplica(t *testing.T) {
	_, urls := askingStack(t, 2)
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"elicitation":{},"roots":{}},"clientInfo":{"name":"t","version":"0"}}}`
	resp, _ := testcluster.PostMCP(t, urls[0], "", "", init)
	session := resp.Header.Get("Mcp-Session-Id")
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, urls[0], strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_all","arguments":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	call, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Body.Close()
	sc := bufio.NewScanner(call.Body)
	answers := map[string]any{
		"sampling/createMessage": map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "via replica two"}},
		"elicitation/create":     map[string]any{"action": "accept", "content": map[string]any{"name": "Grace"}},
		"roots/list":             map[string]any{"roots": []any{map[string]any{"uri": "file:///two"}}},
	}
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		json.Unmarshal([]byte(data), &m)
		if method, _ := m["method"].(string); answers[method] != nil {
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m["id"], "result": answers[method]})
			r, _ := testcluster.PostMCP(t, urls[1], "", session, string(b))
			if r.StatusCode != http.StatusAccepted {
				t.Fatalf("the other replica answered the client's answer with %d", r.StatusCode)
			}
			continue
		}
		if m["id"] == 1.0 {
			text := messageText(t, m)
			for _, want := range []string{"via replica two", "Grace", "file:///two"} {
				if !strings.Contains(text, want) {
					t.Errorf("the result lacks %s: %s", want, text)
				}
			}
			return
		}
	}
	t.Fatal("the call's stream ended without its result")
}
