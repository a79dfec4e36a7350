package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// groupStack is a stack whose one worker fronts two server-everything
// processes, "alpha" and "beta", each behind a tap of its own.
type groupStack struct {
	*stack
	alpha, beta *tap
}

// groupServer is a server of a test's group.
type groupServer struct {
	name string
	opts upstream.Options
}

// startGroup runs the two servers in one group, alpha without get-env and
// beta with only echo, the long operation and its prompts: each its own
// policy.
func startGroup(t *testing.T) *groupStack {
	t.Helper()
	alphaCmd, alpha := stdioEverything(t)
	betaCmd, beta := stdioEverything(t)
	st := &groupStack{stack: startBare(t), alpha: alpha, beta: beta}
	runGroup(t, st.stack,
		groupServer{"alpha", upstream.Options{Command: alphaCmd, Config: &upstream.Config{Deny: []string{"get-env"}}}},
		groupServer{"beta", upstream.Options{Command: betaCmd, Config: &upstream.Config{Allow: []string{"echo", longOp}}}})
	// The worker has both servers' tools; wait until the coordinator does.
	st.waitTools(t, func(tools map[string]*pb.Tool) bool {
		return tools["alpha_"+longOp] != nil && tools["beta_"+longOp] != nil
	})
	return st
}

// runGroup runs a group of servers on a worker of st until the test ends,
// and waits until every server has registered its tools.
func runGroup(t *testing.T, st *stack, servers ...groupServer) {
	t.Helper()
	var g *upstream.Group
	testcluster.StartWorker(t, worker.Options{Coordinator: st.coordAddr, Name: "group"}, func(w *worker.Worker) {
		g = upstream.NewGroup(w, testLogger(t))
		for _, s := range servers {
			s.opts.Logger, s.opts.MinBackoff, s.opts.TerminateWait = testLogger(t), 20*time.Millisecond, 200*time.Millisecond
			if _, err := g.Add(s.name, s.opts); err != nil {
				t.Fatal(err)
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }() // waited for in the cleanup
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("group Run: %v", err)
		}
	})
	if err := g.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestGroupOfOneRenamesNothing: a group of one server offers its names as
// they are, and its serverInfo reaches clients, as a lone Adapter does.
func TestGroupOfOneRenamesNothing(t *testing.T) {
	cmd, _ := stdioEverything(t)
	st := startBare(t)
	runGroup(t, st, groupServer{"solo", upstream.Options{Command: cmd}})
	tools := st.waitTools(t, func(tools map[string]*pb.Tool) bool { return tools["echo"] != nil })
	for name := range tools {
		if strings.HasPrefix(name, "solo_") {
			t.Errorf("tool %q is prefixed, with only one server", name)
		}
	}
	cs := clientSession(t, st.url, nil)
	if info := cs.InitializeResult().ServerInfo; info == nil || info.Name != "mcp-servers/everything" {
		t.Errorf("serverInfo %+v; want the server's own", info)
	}
	prompt, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "simple-prompt"})
	if err != nil || len(prompt.Messages) == 0 {
		t.Errorf("prompts/get simple-prompt = %v, %v", prompt, err)
	}
}

// TestGroupListsBothServersPrefixed: the coordinator lists each server's
// tools under its name, each filtered by its own policy, and nothing
// unprefixed.
func TestGroupListsBothServersPrefixed(t *testing.T) {
	st := startGroup(t)
	tools := st.waitTools(t, func(tools map[string]*pb.Tool) bool {
		return tools["alpha_echo"] != nil && tools["beta_echo"] != nil && tools["beta_"+longOp] != nil
	})
	for name := range tools {
		if !strings.HasPrefix(name, "alpha_") && !strings.HasPrefix(name, "beta_") {
			t.Errorf("tool %q is listed without a server's prefix", name)
		}
	}
	for name, want := range map[string]bool{"alpha_get-sum": true, "alpha_get-env": false, "beta_get-sum": false, "beta_get-env": false} {
		if got := tools[name] != nil; got != want {
			t.Errorf("%s listed: %v, want %v (each server's own policy)", name, got, want)
		}
	}
}

// TestGroupRoutesCallsPromptsAndResources calls a tool, gets a prompt and
// completes its argument through each server by its prefixed name, and
// reads a resource both servers list: each request reaches its own server
// under the server's own name, and the shared URI only alpha, the first.
func TestGroupRoutesCallsPromptsAndResources(t *testing.T) {
	st := startGroup(t)
	cs := clientSession(t, st.url, nil)
	for _, srv := range []string{"alpha", "beta"} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: srv + "_echo", Arguments: map[string]any{"message": srv}})
		if err != nil || res.IsError || len(res.Content) != 1 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, srv) {
			t.Fatalf("%s_echo = %+v, %v; want its echo", srv, res, err)
		}
	}
	prompt, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "beta_simple-prompt"})
	if err != nil || len(prompt.Messages) == 0 {
		t.Fatalf("prompts/get beta_simple-prompt = %v, %v", prompt, err)
	}
	done, err := cs.Complete(t.Context(), &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "alpha_completable-prompt"},
		Argument: mcp.CompleteParamsArgument{Name: "department", Value: "Eng"},
	})
	if err != nil || len(done.Completion.Values) != 1 || done.Completion.Values[0] != "Engineering" {
		t.Fatalf("completion/complete of alpha_completable-prompt = %+v, %v; want Engineering", done, err)
	}
	const uri = "demo://resource/static/document/architecture.md"
	if res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri}); err != nil || len(res.Contents) != 1 {
		t.Fatalf("resources/read %s = %v, %v", uri, res, err)
	}
	alpha, beta := st.alpha.messages(t), st.beta.messages(t)
	for _, c := range []struct {
		srv    string
		msgs   []wireMsg
		method string
		name   string
		want   bool
	}{
		{"alpha", alpha, "tools/call", "echo", true},
		{"beta", beta, "tools/call", "echo", true},
		{"beta", beta, "prompts/get", "simple-prompt", true},
		{"alpha", alpha, "prompts/get", "simple-prompt", false},
		{"alpha", alpha, "completion/complete", "", true},
		{"beta", beta, "completion/complete", "", false},
		{"alpha", alpha, "resources/read", "", true},
		{"beta", beta, "resources/read", "", false},
	} {
		if got := received(c.msgs, c.method, c.name); got != c.want {
			t.Errorf("%s received %s %q: %v, want %v", c.srv, c.method, c.name, got, c.want)
		}
	}
}

// received says whether the server received method, naming name (if
// given) in its params.
func received(msgs []wireMsg, method, name string) bool {
	for _, m := range msgs {
		if m.Dir == "in" && m.Method == method && (name == "" || m.Params.Name == name) {
			return true
		}
	}
	return false
}

// TestGroupCancelLandsInItsServer runs the long operation on both servers
// at once and cancels alpha's after two progress notifications: alpha
// receives notifications/cancelled for its own request and beta none,
// beta's call completes with all its progress, and the audit names each
// call's prefixed tool with its own outcome.
func TestGroupCancelLandsInItsServer(t *testing.T) {
	st := startGroup(t)
	var mu sync.Mutex
	progress := map[string]int{}
	alphaTwice := make(chan struct{})
	cs := clientSession(t, st.url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			tok, _ := r.Params.ProgressToken.(string)
			progress[tok]++
			if tok == "alpha" && progress[tok] == 2 {
				close(alphaTwice)
			}
		},
	})
	call := func(ctx context.Context, srv, args string, errc chan<- error, res **mcp.CallToolResult) {
		p := &mcp.CallToolParams{Name: srv + "_" + longOp, Arguments: jsonArgs(t, args)}
		p.SetProgressToken(srv)
		r, err := cs.CallTool(ctx, p)
		*res = r
		errc <- err
	}
	alphaCtx, cancelAlpha := context.WithCancel(t.Context())
	defer cancelAlpha()
	alphaErr, betaErr := make(chan error, 1), make(chan error, 1)
	var alphaRes, betaRes *mcp.CallToolResult
	go call(alphaCtx, "alpha", longOpArgs, alphaErr, &alphaRes)                 // waited for below
	go call(t.Context(), "beta", `{"duration":6,"steps":4}`, betaErr, &betaRes) // waited for below
	select {
	case <-alphaTwice:
	case err := <-alphaErr:
		t.Fatalf("alpha's call ended before two progress notifications: %v", err)
	}
	cancelAlpha()
	if err := <-alphaErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("alpha's call = %v, want cancelled", err)
	}
	if err := <-betaErr; err != nil || betaRes.IsError || !strings.Contains(betaRes.Content[0].(*mcp.TextContent).Text, "Long running operation completed") {
		t.Fatalf("beta's call = %+v, %v; want its result", betaRes, err)
	}
	mu.Lock()
	if progress["beta"] != 4 {
		t.Errorf("beta's client got %d progress notifications, want all 4", progress["beta"])
	}
	mu.Unlock()

	alpha, beta := st.alpha.messages(t), st.beta.messages(t)
	up := findCall(alpha, longOp, `"steps":4`)
	if up == nil {
		t.Fatal("alpha never received its tools/call under its own name")
	}
	if got := cancelled(alpha); len(got) != 1 || got[0] != string(up.ID) {
		t.Errorf("alpha received notifications/cancelled for %v; want one, for its own id %s", got, up.ID)
	}
	if got := cancelled(beta); len(got) != 0 {
		t.Errorf("beta received notifications/cancelled for %v; want none", got)
	}
	if up := findCall(beta, longOp, `"steps":4`); up == nil || len(progressSent(beta, up.Params.Meta.Token)) != 4 {
		t.Errorf("beta's call %v; want it received and all 4 steps sent", up)
	}
	testcluster.WaitFor(t, "alpha's cancelled record and beta's completed one", func() bool {
		a, b := st.audits(t, "alpha_"+longOp), st.audits(t, "beta_"+longOp)
		return len(a) == 1 && a[0].Outcome == "cancelled" && a[0].Initiator == "client" &&
			len(b) == 1 && b[0].Outcome == "completed"
	})
}

// clientSession connects a Go SDK client to url, closed with the test.
func clientSession(t *testing.T, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "group-test", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func jsonArgs(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGroupAddRefuses names that cannot prefix a tool, and a name twice.
func TestGroupAddRefuses(t *testing.T) {
	g := upstream.NewGroup(worker.New(worker.Options{Coordinator: "127.0.0.1:1"}), nil)
	opts := upstream.Options{Command: []string{"true"}}
	if _, err := g.Add("files", opts); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "a_b", "-x", "a.b", "dé", strings.Repeat("x", 33)} {
		if _, err := g.Add(name, opts); !errors.Is(err, upstream.ErrServerName) {
			t.Errorf("Add(%q) = %v, want ErrServerName", name, err)
		}
	}
	if _, err := g.Add("files", opts); err == nil || !strings.Contains(err.Error(), `two servers named "files"`) {
		t.Errorf("Add of a name twice = %v", err)
	}
}

// TestGroupRoutesByURI fronts server-everything over stdio and the Go
// fixture server over Streamable HTTP from one worker: each resource is
// read from the server that lists it (the fixture's ui:// one only it
// lists), names are prefixed but URIs are not, and a tool of the HTTP
// server streams its progress through the group. With two servers,
// neither's serverInfo is shown as the gateway's.
func TestGroupRoutesByURI(t *testing.T) {
	cmd, everythingTap := stdioEverything(t)
	st := startBare(t)
	runGroup(t, st, groupServer{"everything", upstream.Options{Command: cmd}}, groupServer{"fixture", fixtureHTTP(t, false)})
	st.waitTools(t, func(tools map[string]*pb.Tool) bool {
		return tools["everything_echo"] != nil && tools["fixture_burst"] != nil
	})
	var progress atomic.Int32
	cs := clientSession(t, st.url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
	})
	if info := cs.InitializeResult().ServerInfo; info != nil && (info.Name == fixtureName || info.Name == "mcp-servers/everything") {
		t.Errorf("serverInfo %+v; want the gateway's own with two servers", info)
	}
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: fixtureAppURI})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != fixtureAppHTML {
		t.Fatalf("resources/read %s = %+v, %v; want the fixture's app", fixtureAppURI, res, err)
	}
	if received(everythingTap.messages(t), "resources/read", "") {
		t.Error("server-everything received a resources/read of the fixture's URI")
	}
	const doc = "demo://resource/static/document/architecture.md"
	if res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: doc}); err != nil || len(res.Contents) != 1 || res.Contents[0].Text == "" {
		t.Fatalf("resources/read %s = %+v, %v; want server-everything's document", doc, res, err)
	}
	names := map[string]string{}
	for r, err := range cs.Resources(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names[r.URI] = r.Name
	}
	if names[fixtureAppURI] != "fixture_app" {
		t.Errorf("the fixture's resource is named %q; want fixture_app, under its unchanged URI", names[fixtureAppURI])
	}
	p := &mcp.CallToolParams{Name: "fixture_burst", Arguments: map[string]any{"n": 5}}
	p.SetProgressToken("burst")
	out, err := cs.CallTool(t.Context(), p)
	if err != nil || out.IsError || out.Content[0].(*mcp.TextContent).Text != "burst 5" {
		t.Fatalf("fixture_burst = %+v, %v", out, err)
	}
	testcluster.WaitFor(t, "the five progress notifications", func() bool { return progress.Load() == 5 })
	greet, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "fixture_greet"})
	if err != nil || len(greet.Messages) != 1 {
		t.Fatalf("prompts/get fixture_greet = %+v, %v", greet, err)
	}
}
