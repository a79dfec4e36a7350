package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// subEvent is a resources/subscribe or unsubscribe a worker handled.
type subEvent struct {
	method, subscriber, uri string
}

// subServer is a worker's resources that behave like an upstream server
// over one connection: it sends an update of a URI (on touch) only while
// someone is subscribed to it.
type subServer struct {
	events chan subEvent
	w      *worker.Worker

	mu   sync.Mutex
	subs map[string]map[string]bool // uri → subscribers
}

func (s *subServer) register(w *worker.Worker) {
	s.w = w
	for _, uri := range []string{"test://a", "test://b", "test://c"} {
		w.HandleResource(&worker.Resource{URI: uri, Name: uri, MIMEType: "text/plain"},
			func(context.Context, *worker.Call) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: "content of " + uri}}}, nil
			})
	}
	w.HandleSubscriptions(func(_ context.Context, c *worker.Call) error {
		s.mu.Lock()
		if s.subs[c.URI()] == nil {
			s.subs[c.URI()] = map[string]bool{}
		}
		if c.Method == worker.MethodResourcesSubscribe {
			s.subs[c.URI()][c.Subscriber()] = true
		} else {
			delete(s.subs[c.URI()], c.Subscriber())
		}
		s.mu.Unlock()
		s.events <- subEvent{c.Method, c.Subscriber(), c.URI()}
		return nil
	})
	w.Handle(worker.Tool{Name: "touch"}, func(_ context.Context, c *worker.Call) (*worker.Result, error) {
		var a struct{ URI string }
		if err := c.Bind(&a); err != nil {
			return nil, err
		}
		s.mu.Lock()
		on := len(s.subs[a.URI]) > 0
		s.mu.Unlock()
		if on {
			s.w.NotifySession("", "notifications/resources/updated", map[string]string{"uri": a.URI})
		}
		return worker.Text(fmt.Sprint(on)), nil
	})
}

// event waits for the worker's next subscription event.
func (s *subServer) event(t testing.TB) subEvent {
	t.Helper()
	select {
	case e := <-s.events:
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no subscription event at the worker")
		return subEvent{}
	}
}

// subStack is etcd, two coordinator replicas, the subServer's worker
// attached to the second, and gateway A on the first, B on the second:
// an update comes from the worker's replica, whichever replica holds
// the listen.
type subStack struct {
	cli        *etcdtest.Cluster
	srv        *subServer
	gA, gB     *gateway.Gateway
	urlA, urlB string
}

func newSubStack(t testing.TB) *subStack {
	t.Helper()
	cl := etcdtest.Single(t)
	c0 := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{Name: "c0"})
	c1 := testcluster.StartCoordinator(t, cl.Client(), coordinator.Options{Name: "c1"})
	st := &subStack{cli: cl, srv: &subServer{events: make(chan subEvent, 64), subs: map[string]map[string]bool{}}}
	testcluster.StartWorker(t, worker.Options{Coordinator: c1.Addr, Name: "res"}, st.srv.register)
	cc0, cc1 := c0.Client(t), c1.Client(t)
	// Both replicas' catalogues, each gateway's first: a replica whose
	// view lagged would send its gateway the full list later, as a change,
	// and a listen for toolsListChanged would hear it.
	for _, cc := range []pb.CoordinatorServiceClient{cc0, cc1} {
		testcluster.WaitFor(t, "the resources", func() bool {
			resp, err := cc.ListTools(t.Context(), &pb.ListToolsRequest{})
			return err == nil && len(resp.GetOffers()) > 0 && len(resp.GetTools()) > 0
		})
	}
	st.gA, st.urlA = testcluster.StartGateway(t, c0.Conn(t), gateway.Options{Name: "gA"})
	st.gB, st.urlB = testcluster.StartGateway(t, c1.Conn(t), gateway.Options{Name: "gB"})
	return st
}

// touch asks the worker, through url, to update uri.
func touch(t *testing.T, url, uri string) {
	t.Helper()
	status, msgs := post26(t, url, request(1, "tools/call", map[string]any{"name": "touch", "arguments": map[string]any{"uri": uri}, "_meta": envelope(map[string]any{})}),
		headers2026("tools/call", "touch"))
	if status != http.StatusOK || len(msgs) == 0 || msgs[len(msgs)-1].Result == nil {
		t.Fatalf("touch %s: status %d, %+v", uri, status, msgs)
	}
}

// httpListen is an open subscriptions/listen stream.
type httpListen struct {
	id    string
	scope string // the listen's scope, from the response header
	msgs  chan rpcMsg
	stop  func()
}

// openListen opens a listen with the given filter on url and returns it
// once acknowledged, with the acknowledgement's filter.
func openListen(t testing.TB, url, id string, filter map[string]any, caps map[string]any) (*httpListen, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	b, _ := json.Marshal(request(id, "subscriptions/listen", map[string]any{"_meta": envelope(caps), "notifications": filter}))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers2026("subscriptions/listen", "") {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l := &httpListen{id: id, scope: resp.Header.Get(gateway.HeaderScope), msgs: make(chan rpcMsg, 64)}
	done := make(chan struct{})
	go func() { // owned: stop ends it by cancelling the request
		defer close(done)
		defer close(l.msgs)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m rpcMsg
				json.Unmarshal([]byte(data), &m)
				l.msgs <- m
			}
		}
	}()
	var once sync.Once
	l.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(l.stop)
	ack := l.next(t)
	if ack.Method != "notifications/subscriptions/acknowledged" || subscriptionID(ack) != fmt.Sprintf("%q", id) {
		t.Fatalf("listen %s: first message %s %s; want its acknowledgement", id, ack.Method, ack.Params)
	}
	var p struct {
		Notifications map[string]any `json:"notifications"`
	}
	json.Unmarshal(ack.Params, &p)
	return l, p.Notifications
}

func (l *httpListen) next(t testing.TB) rpcMsg {
	t.Helper()
	select {
	case m, ok := <-l.msgs:
		if !ok {
			t.Fatalf("listen %s ended", l.id)
		}
		return m
	case <-time.After(20 * time.Second):
		t.Fatalf("listen %s: nothing within 20s", l.id)
		return rpcMsg{}
	}
}

// nextUpdate is the next message, which must be an update of uri tagged
// with the listen's id.
func (l *httpListen) nextUpdate(t *testing.T, uri string) {
	t.Helper()
	m := l.next(t)
	var p struct {
		URI string `json:"uri"`
	}
	json.Unmarshal(m.Params, &p)
	if m.Method != "notifications/resources/updated" || p.URI != uri || subscriptionID(m) != fmt.Sprintf("%q", l.id) {
		t.Fatalf("listen %s: got %s %s; want an update of %s tagged with its id", l.id, m.Method, m.Params, uri)
	}
}

func subscriptionID(m rpcMsg) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	json.Unmarshal(m.Params, &p)
	return string(p.Meta["io.modelcontextprotocol/subscriptionId"])
}

// TestListenResourceSubscriptions: listens on gateway A (coordinator
// replica c0) name resources; the worker serving them is attached to c1,
// and its updates are triggered through gateway B. Each listen hears the
// updates of exactly the URIs it named, tagged with its id; a URI no
// worker serves is left out of the acknowledgement; another client's
// listen hears none of them. The worker is subscribed per listen, and
// unsubscribed, and the coordinator's record removed, when the listen's
// stream closes.
func TestListenResourceSubscriptions(t *testing.T) {
	st := newSubStack(t)
	x, ackX := openListen(t, st.urlA, "x", map[string]any{"resourceSubscriptions": []string{"test://a", "test://nowhere"}}, map[string]any{})
	if got, _ := json.Marshal(ackX["resourceSubscriptions"]); string(got) != `["test://a"]` {
		t.Fatalf("x acknowledged %s; want only test://a", got)
	}
	if e := st.srv.event(t); e != (subEvent{worker.MethodResourcesSubscribe, x.scope, "test://a"}) {
		t.Fatalf("worker saw %+v; want x's subscribe of test://a", e)
	}
	y, _ := openListen(t, st.urlA, "y", map[string]any{"resourceSubscriptions": []string{"test://b"}}, map[string]any{})
	st.srv.event(t)
	z, _ := openListen(t, st.urlB, "z", map[string]any{"resourceSubscriptions": []string{"test://c"}, "toolsListChanged": true}, map[string]any{})
	st.srv.event(t)

	// Updates come in the order the worker sent them, so each listen's
	// first message after a foreign update shows it was not sent.
	for _, uri := range []string{"test://a", "test://b", "test://a", "test://c"} {
		touch(t, st.urlB, uri)
	}
	x.nextUpdate(t, "test://a")
	x.nextUpdate(t, "test://a") // not test://b, y's
	y.nextUpdate(t, "test://b") // not test://a
	z.nextUpdate(t, "test://c") // none of a, b: another client's

	// x's stream closes: the worker is unsubscribed for x, and x's
	// record at the coordinator is gone; y's stays.
	x.stop()
	if e := st.srv.event(t); e != (subEvent{worker.MethodResourcesUnsubscribe, x.scope, "test://a"}) {
		t.Fatalf("worker saw %+v; want x's unsubscribe of test://a", e)
	}
	waitFor(t, "x's subscriptions removed", func() bool {
		resp, err := st.cli.Client().Get(t.Context(), prefix+"subs/"+x.scope+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
	touch(t, st.urlB, "test://b")
	y.nextUpdate(t, "test://b")
	y.stop()
	z.stop()
	for range 2 {
		if e := st.srv.event(t); e.method != worker.MethodResourcesUnsubscribe {
			t.Fatalf("worker saw %+v; want the unsubscribes of y and z", e)
		}
	}
}

// TestStdioListenResources: over stdio the connection's listens share
// its scope. Each hears the updates of the URIs it named, tagged with
// its id; two listens naming one URI subscribe the worker once, and the
// worker is unsubscribed when the last of them is cancelled.
func TestStdioListenResources(t *testing.T) {
	st := newSubStack(t)
	c := serveStdio(t, st.gA)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	listen := func(id, uri string) {
		t.Helper()
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"subscriptions/listen","params":{%s,"notifications":{"resourceSubscriptions":[%q]}}}`, id, meta, uri))
		m := c.next(t)
		n, _ := m["params"].(map[string]any)["notifications"].(map[string]any)
		if m["method"] != "notifications/subscriptions/acknowledged" || subscriptionOf(m) != id || !slices.Equal(anyStrings(n["resourceSubscriptions"]), []string{uri}) {
			t.Fatalf("listen %s: first message %v; want its acknowledgement granting %s", id, m, uri)
		}
	}
	update := func(id, uri string) {
		t.Helper()
		m := c.next(t)
		p, _ := m["params"].(map[string]any)
		if m["method"] != "notifications/resources/updated" || p["uri"] != uri || subscriptionOf(m) != id {
			t.Fatalf("got %v; want an update of %s tagged %s", m, uri, id)
		}
	}
	// cancel cancels a listen, and returns once the gateway read the
	// cancel: it reads lines in order, and answers the request after it.
	probe := 100
	cancel := func(id string) {
		t.Helper()
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%q,%s}}`, id, meta))
		probe++
		c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{%s}}`, probe, meta))
		if m := c.next(t); m["id"] != float64(probe) {
			t.Fatalf("after cancelling %s: %v; want the answer to tools/list", id, m)
		}
	}
	listen("l1", "test://a")
	conn := st.srv.event(t).subscriber
	if !strings.HasPrefix(conn, "conn:") {
		t.Fatalf("subscriber %q; want the stdio connection's scope", conn)
	}
	listen("l2", "test://b")
	st.srv.event(t)
	listen("l3", "test://a") // held already: no second subscribe
	touch(t, st.urlB, "test://a")
	touch(t, st.urlB, "test://b")
	update("l1", "test://a") // copies go out in id order
	update("l3", "test://a")
	update("l2", "test://b")

	cancel("l1") // l3 still holds test://a
	touch(t, st.urlB, "test://a")
	touch(t, st.urlB, "test://b")
	update("l3", "test://a")
	update("l2", "test://b")
	cancel("l3")
	if e := st.srv.event(t); e != (subEvent{worker.MethodResourcesUnsubscribe, conn, "test://a"}) {
		t.Fatalf("worker saw %+v; want one unsubscribe of test://a, once l1 and l3 were cancelled", e)
	}
	touch(t, st.urlB, "test://a") // nobody is subscribed: no update
	touch(t, st.urlB, "test://b")
	update("l2", "test://b")
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}
