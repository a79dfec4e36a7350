package surface

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// step is one request of the plan every client makes.
type step struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params,omitempty"`
}

// plan asks server-everything for everything it offers besides tools,
// and one read its template routes but its handler refuses (an upstream
// error must pass through as the server's own).
var plan = []step{
	{Method: "resources/list"},
	{Method: "resources/templates/list"},
	{Method: "prompts/list"},
	{Method: "resources/read", Params: map[string]any{"uri": "demo://resource/static/document/architecture.md"}},
	{Method: "resources/read", Params: map[string]any{"uri": "demo://resource/dynamic/text/1"}},
	{Method: "resources/read", Params: map[string]any{"uri": "demo://resource/dynamic/text/0"}},
	{Method: "prompts/get", Params: map[string]any{"name": "simple-prompt"}},
	{Method: "prompts/get", Params: map[string]any{"name": "args-prompt", "arguments": map[string]any{"city": "Lyon", "state": "Rhône"}}},
	{Method: "prompts/get", Params: map[string]any{"name": "resource-prompt", "arguments": map[string]any{"resourceType": "Text", "resourceId": "2"}}},
	{Method: "completion/complete", Params: map[string]any{
		"ref": map[string]any{"type": "ref/prompt", "name": "completable-prompt"}, "argument": map[string]any{"name": "department", "value": "S"}}},
	{Method: "completion/complete", Params: map[string]any{
		"ref": map[string]any{"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"}, "argument": map[string]any{"name": "resourceId", "value": "7"}}},
}

// subscribeURI is the resource the TypeScript v2 client subscribes to
// after the plan, and hears one update of.
const subscribeURI = "demo://resource/dynamic/text/1"

// TestDifferential: the official TypeScript clients v1 and v2 and the Go
// SDK client make the same requests to server-everything directly and
// through the gateway fronting it, over stdio and over HTTP; every answer
// (results and errors) is the same, modulo request ids (which the
// clients hide) and the time the server stamps into dynamic resources.
// The v2 client negotiates its era: 2025-11-25 with server-everything,
// 2026-07-28 with the gateway; after the plan it subscribes to a resource
// as its era does (resources/subscribe, or subscriptions/listen with
// resourceSubscriptions) and hears the update the server then sends.
func TestDifferential(t *testing.T) {
	script := everything(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			var direct target
			var opts upstream.Options
			if transport == "stdio" {
				direct = target{stdio: []string{"node", script, "stdio"}}
				opts.Command = direct.stdio
			} else {
				direct = target{url: httpEverything(t)}
				opts.URL = direct.url
			}
			s := startFronting(t, opts)
			gw := target{url: s.url}
			for _, c := range []struct {
				name string
				ask  func(*testing.T, target) *answers
			}{{"typescript-v1", askTypeScript}, {"go-sdk", askGo}, {"typescript-v2", askTypeScriptV2}} {
				t.Run(c.name, func(t *testing.T) {
					want, got := c.ask(t, direct), c.ask(t, gw)
					compare(t, want, got)
					if c.name == "typescript-v2" && (want.Era != "legacy" || got.Era != "modern") {
						t.Errorf("the v2 client spoke %q directly and %q through the gateway; want legacy and modern", want.Era, got.Era)
					}
				})
			}
		})
	}
}

// target is a server to ask: a command on stdio, or a URL.
type target struct {
	stdio []string
	url   string
}

// answers are a client's answers to the plan, normalised.
type answers struct {
	Capabilities map[string]bool `json:"capabilities"`
	Answers      []any           `json:"answers"`
	Era          string          `json:"era,omitempty"` // the v2 client's: legacy or modern
}

func compare(t *testing.T, want, got *answers) {
	t.Helper()
	if !reflect.DeepEqual(want.Capabilities, got.Capabilities) {
		t.Errorf("capabilities through the gateway %v, directly %v", got.Capabilities, want.Capabilities)
	}
	if len(want.Answers) != len(got.Answers) {
		t.Fatalf("%d answers through the gateway, %d directly", len(got.Answers), len(want.Answers))
	}
	for i := range want.Answers {
		if !reflect.DeepEqual(want.Answers[i], got.Answers[i]) {
			w, _ := json.MarshalIndent(want.Answers[i], "", " ")
			g, _ := json.MarshalIndent(got.Answers[i], "", " ")
			t.Errorf("%v (step %d) through the gateway differs:\n%s\ndirectly:\n%s", want.Answers[i].(map[string]any)["method"], i, g, w)
		}
	}
}

// stamped is the time server-everything writes into dynamic content.
var stamped = regexp.MustCompile(`created at [0-9:]+( [AP]M)?`)

// normalise decodes v's JSON form, with server-everything's timestamps
// masked, so answers compare as values. It also drops what differs only
// in form:
//   - 2026-07-28's envelope fields (resultType, and the caching hints
//     ttlMs and cacheScope): the Go SDK client speaks 2026-07-28 to the
//     gateway and 2025-11-25 to server-everything;
//   - members whose value is false, 0 or "": the adapter relays the
//     server's answers through the Go SDK's types, which omit such
//     defaults ("required": false, "hasMore": false) and add the empty
//     caching hints.
func normalise(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	b = stamped.ReplaceAll(b, []byte("created at <time>"))
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return dropDefaults(out)
}

func dropDefaults(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch {
			case k == "resultType" || k == "ttlMs" || k == "cacheScope",
				x == false, x == "", x == float64(0):
				delete(v, k)
			default:
				v[k] = dropDefaults(x)
			}
		}
	case []any:
		for i := range v {
			v[i] = dropDefaults(v[i])
		}
	}
	return v
}

func caps(resources, prompts, completions, subscribe bool) map[string]bool {
	return map[string]bool{"resources": resources, "prompts": prompts, "completions": completions, "subscribe": subscribe}
}

// askTypeScript runs the plan with test/clients/surface2025.mjs.
func askTypeScript(t *testing.T, to target) *answers {
	return askScript(t, to, "surface2025.mjs")
}

// askTypeScriptV2 runs the plan, then a subscription, with
// test/clients/surface-v2.mjs.
func askTypeScriptV2(t *testing.T, to target) *answers {
	return askScript(t, to, "surface-v2.mjs", "--subscribe", subscribeURI)
}

// askScript runs the plan with a test/clients script printing answers.
func askScript(t *testing.T, to target, script string, extra ...string) *answers {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p, _ := json.Marshal(plan)
	args := append([]string{script, "--plan", string(p)}, extra...)
	if to.url != "" {
		args = append(args, "--url", to.url)
	} else {
		args = append(args, "--stdio", shellJoin(to.stdio))
	}
	cmd := nodetest.Node(t, ctx, args...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s: %v\n%s", script, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var raw struct {
		Capabilities struct {
			Resources   *struct{ Subscribe bool } `json:"resources"`
			Prompts     any                       `json:"prompts"`
			Completions any                       `json:"completions"`
		} `json:"capabilities"`
		Answers []any  `json:"answers"`
		Era     string `json:"era"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("%s printed %q: %v", script, out, err)
	}
	c := raw.Capabilities
	return &answers{
		Capabilities: caps(c.Resources != nil, c.Prompts != nil, c.Completions != nil, c.Resources != nil && c.Resources.Subscribe),
		Answers:      normalise(t, raw.Answers).([]any),
		Era:          raw.Era,
	}
}

func shellJoin(args []string) string {
	s := ""
	for i, a := range args {
		if i > 0 {
			s += " "
		}
		s += "'" + a + "'"
	}
	return s
}

// askGo runs the plan with the Go SDK's client.
func askGo(t *testing.T, to target) *answers {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var tr mcp.Transport
	if to.url != "" {
		tr = &mcp.StreamableClientTransport{Endpoint: to.url, MaxRetries: -1}
	} else {
		tr = &mcp.CommandTransport{Command: exec.CommandContext(ctx, to.stdio[0], to.stdio[1:]...)}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpcancel-surface", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	sc := cs.InitializeResult().Capabilities
	out := &answers{Capabilities: caps(sc.Resources != nil, sc.Prompts != nil, sc.Completions != nil, sc.Resources != nil && sc.Resources.Subscribe)}
	var list []any
	for _, st := range plan {
		res, err := askGoStep(ctx, cs, st)
		a := map[string]any{"method": st.Method}
		var rpcErr *jsonrpc.Error
		switch {
		case errors.As(err, &rpcErr):
			a["error"] = map[string]any{"code": rpcErr.Code, "message": rpcErr.Message}
		case err != nil:
			t.Fatalf("%s: %v", st.Method, err)
		default:
			a["result"] = res
		}
		list = append(list, a)
	}
	out.Answers = normalise(t, list).([]any)
	return out
}

func askGoStep(ctx context.Context, cs *mcp.ClientSession, st step) (any, error) {
	var params json.RawMessage
	if st.Params != nil {
		params, _ = json.Marshal(st.Params)
	}
	switch st.Method {
	case "resources/list":
		return collect(cs.Resources(ctx, nil), "resources")
	case "resources/templates/list":
		return collect(cs.ResourceTemplates(ctx, nil), "resourceTemplates")
	case "prompts/list":
		return collect(cs.Prompts(ctx, nil), "prompts")
	case "resources/read":
		var p mcp.ReadResourceParams
		json.Unmarshal(params, &p)
		return cs.ReadResource(ctx, &p)
	case "prompts/get":
		var p mcp.GetPromptParams
		json.Unmarshal(params, &p)
		return cs.GetPrompt(ctx, &p)
	case "completion/complete":
		var p mcp.CompleteParams
		json.Unmarshal(params, &p)
		return cs.Complete(ctx, &p)
	}
	return nil, fmt.Errorf("unknown method %s", st.Method)
}

// collect gathers every page of a list.
func collect[T any](seq func(func(T, error) bool), field string) (any, error) {
	all := []T{}
	for v, err := range seq {
		if err != nil {
			return nil, err
		}
		all = append(all, v)
	}
	return map[string]any{field: all}, nil
}
