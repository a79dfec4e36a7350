package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/nodetest"
)

// The Go SDK client, speaking 2026-07-28, drives MRTR by itself: the
// native ask_all tool samples, elicits and lists roots through
// Call.Sample, Call.Elicit and Call.Roots; the gateway answers each round
// input_required, the SDK calls its handler and retries with the answers
// and the sealed requestState, and the last round's result carries all
// three. Each handler runs once: a round replays the tool with every
// answer so far, so nothing is asked twice.
func TestMRTRDrivenByGoSDKClient(t *testing.T) {
	key := bytes.Repeat([]byte{9}, 32)
	_, urls, coord := askingStackFull(t, gateway.Options{StateKey: key})
	var mu sync.Mutex
	asked := map[string]int{}
	count := func(method string) {
		mu.Lock()
		defer mu.Unlock()
		asked[method]++
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "mrtr-go-sdk", Version: "0"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			count("sampling/createMessage")
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "sampled by the Go SDK"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			count("elicitation/create")
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Hopper"}}, nil
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///go-sdk-root"})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: urls[0], MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult(); v != nil && v.ProtocolVersion != "" && v.ProtocolVersion < "2026-07-28" {
		t.Fatalf("the session speaks %s, want 2026-07-28", v.ProtocolVersion)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask_all", Arguments: map[string]any{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	if res.IsError {
		t.Fatalf("ask_all failed: %s", b)
	}
	for _, want := range []string{"sampled by the Go SDK", "Hopper", "file:///go-sdk-root"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the result lacks %q: %s", want, b)
		}
	}
	mu.Lock()
	if asked["sampling/createMessage"] != 1 || asked["elicitation/create"] != 1 {
		t.Errorf("the client's handlers ran %v, want each once", asked)
	}
	mu.Unlock()
	// Three rounds ended input_required (cancelled by the tool, noting
	// what they asked), and the last one completed.
	recs, _ := childOutcomes(t, coord, "ask_all")
	outcomes := map[string]int{}
	for _, r := range recs {
		outcomes[r.GetOutcome()+"/"+r.GetInitiator().String()]++
	}
	if outcomes["cancelled/INITIATOR_TOOL"] != 3 || outcomes["completed/INITIATOR_UNSPECIFIED"] != 1 || len(recs) != 4 {
		t.Errorf("the rounds' audit: %v, want three input_required rounds and one completion", outcomes)
	}
}

// The official TypeScript v2 client, pinned to 2026-07-28, drives the
// same rounds with the handlers it registers for 2025's server requests.
func TestMRTRDrivenByTypeScriptV2Client(t *testing.T) {
	key := bytes.Repeat([]byte{10}, 32)
	_, urls, coord := askingStackFull(t, gateway.Options{StateKey: key})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := nodetest.Node(t, ctx, "mrtr2026.mjs", "--url", urls[0], "--tool", "ask_all", "--args", `{"n":1}`,
		"--sampling-text", "sampled by the v2 client", "--elicit-content", `{"name":"Liskov"}`,
		"--roots", `[{"uri":"file:///v2-root"}]`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mrtr2026.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	asked := map[string]int{}
	var result map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e["event"] {
		case "connected":
			if e["protocolVersion"] != "2026-07-28" {
				t.Fatalf("the client negotiated %v, want 2026-07-28", e)
			}
		case "asked":
			asked[fmt.Sprint(e["method"])]++
		case "result":
			result, _ = e["result"].(map[string]any)
		}
	}
	b, _ := json.Marshal(result)
	if result == nil || result["isError"] == true {
		t.Fatalf("no result: %s", out)
	}
	for _, want := range []string{"sampled by the v2 client", "Liskov", "file:///v2-root"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the result lacks %q: %s", want, b)
		}
	}
	if asked["sampling/createMessage"] != 1 || asked["elicitation/create"] != 1 || asked["roots/list"] != 1 {
		t.Errorf("the client's handlers ran %v, want each once", asked)
	}
	recs, _ := childOutcomes(t, coord, "ask_all")
	outcomes := map[string]int{}
	for _, r := range recs {
		outcomes[r.GetOutcome()+"/"+r.GetInitiator().String()]++
	}
	if outcomes["cancelled/INITIATOR_TOOL"] != 3 || outcomes["completed/INITIATOR_UNSPECIFIED"] != 1 || len(recs) != 4 {
		t.Errorf("the rounds' audit: %v, want three input_required rounds and one completion", outcomes)
	}
}
