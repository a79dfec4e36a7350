package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// TestSessionNotificationsAcrossReplicas: a worker attached to replica b
// reports a resource update from a connection shared by all clients; the
// gateway watching replica a hears it for exactly the sessions subscribed
// to that URI (through a). An update for a session that did not
// subscribe is dropped. Closing a session (at a) forgets its
// subscriptions and tells the worker (at b) that it ended.
func TestSessionNotificationsAcrossReplicas(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2, workerTo: []int{1}})
	ended := make(chan string, 16)
	e.w.OnSessionEnd(func(s string) { ended <- s })
	ctx := t.Context()
	const x, y = "session:subscriber-xxxxxxxxxxxx", "session:bystander-yyyyyyyyyyyy"
	for _, id := range []string{x, y} {
		if _, err := e.c.OpenSession(ctx, &pb.OpenSessionRequest{Session: &pb.Session{SessionId: id[len("session:"):], Principal: "p", CreatedAt: timestamppb.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	sub := func(session, uri string) {
		t.Helper()
		if _, err := e.c.SubscribeResource(ctx, &pb.SubscribeResourceRequest{Session: session, Principal: "p", Uri: uri}); err != nil {
			t.Fatal(err)
		}
	}
	sub(x, "demo://a")
	sub(y, "demo://b")
	got := watchNotes(t, e.c)
	updated := func(session, uri string) {
		e.w.NotifySession(session, "notifications/resources/updated", map[string]string{"uri": uri})
	}
	marker := func(n int) {
		e.w.NotifySession("conn:marker", "notifications/message", map[string]any{"level": "info", "data": n})
	}
	// The watch may not be registered yet: repeat the first update until
	// it is heard.
	var first *pb.WatchSessionNotificationsResponse
	testcluster.WaitFor(t, "the first update at the other replica's gateway", func() bool {
		updated("", "demo://a")
		select {
		case first = <-got:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
	if !slices.Equal(first.GetSessions(), []string{x}) || first.GetMethod() != "notifications/resources/updated" {
		t.Fatalf("first notification %v", first)
	}
	repeats := true // until the first marker, the first update may come again
	drain := func() *pb.WatchSessionNotificationsResponse {
		t.Helper()
		for {
			select {
			case m := <-got:
				if repeats && slices.Equal(m.GetSessions(), []string{x}) && m.GetMethod() == "notifications/resources/updated" {
					continue // a repeat of the first
				}
				return m
			case <-time.After(10 * time.Second):
				t.Fatal("no notification")
				return nil
			}
		}
	}
	// y did not subscribe to demo://a: its own upstream session's update
	// is dropped, and the marker sent after it is what comes next.
	updated(y, "demo://a")
	marker(1)
	if m := drain(); !slices.Equal(m.GetSessions(), []string{"conn:marker"}) || !jsonHas(m.GetParamsJson(), "data", 1.0) {
		t.Fatalf("after an update for an unsubscribed session: %v", m)
	}
	repeats = false
	updated(y, "demo://b")
	if m := drain(); !slices.Equal(m.GetSessions(), []string{y}) {
		t.Fatalf("y's own update: %v", m)
	}

	if _, err := e.c.CloseSession(ctx, &pb.CloseSessionRequest{SessionId: x[len("session:"):], Principal: "p"}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-ended:
		if s != x {
			t.Fatalf("the worker was told %q ended, want %q", s, x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker at the other replica was not told the session ended")
	}
	updated("", "demo://a") // x's subscription is gone
	marker(2)
	for {
		m := drain()
		if slices.Equal(m.GetSessions(), []string{"conn:marker"}) && jsonHas(m.GetParamsJson(), "data", 2.0) {
			break
		}
		if slices.Contains(m.GetSessions(), x) {
			t.Fatalf("a closed session still got %v", m)
		}
	}
	_, err := e.c.SubscribeResource(ctx, &pb.SubscribeResourceRequest{Session: x, Uri: "demo://a"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("subscribing a closed session: %v", err)
	}
}

// watchNotes is a gateway's watch of session notifications at c; the
// test's cleanup ends it.
func watchNotes(t *testing.T, c pb.CoordinatorServiceClient) <-chan *pb.WatchSessionNotificationsResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	watch, err := c.WatchSessionNotifications(ctx, &pb.WatchSessionNotificationsRequest{Gateway: "g"})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	got := make(chan *pb.WatchSessionNotificationsResponse, 64)
	go func() { // owned: ends when the cleanup cancels the watch, and is drained there
		defer close(got)
		for {
			m, err := watch.Recv()
			if err != nil {
				return
			}
			got <- m
		}
	}()
	t.Cleanup(func() {
		cancel()
		for range got {
		}
	})
	return got
}

func jsonHas(b []byte, key string, want any) bool {
	var m map[string]any
	return json.Unmarshal(b, &m) == nil && m[key] == want
}

// TestSessionRequestsNameTheirWorker: a worker's request toward a session
// outside any call reaches the gateways with its id, which names that
// worker; a cancellation of a request naming another worker is dropped,
// so no worker can pose as another, and its own goes through.
func TestSessionRequestsNameTheirWorker(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2, workerTo: []int{1}})
	got := watchNotes(t, e.c)
	const s = "session:asked-xxxxxxxxxxxxxxxx"
	// The watch may not be registered yet: send a log until it is heard.
	testcluster.WaitFor(t, "a log at the gateway's watch", func() bool {
		e.w.NotifySession(s, "notifications/message", map[string]any{"level": "info", "data": "warm-up"})
		select {
		case <-got:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
	askCtx, giveUp := context.WithCancel(t.Context())
	asked := make(chan error, 1)
	go func() { // owned: ends when giveUp is called below
		_, err := e.w.AskSession(askCtx, s, "roots/list", map[string]any{})
		asked <- err
	}()
	var req *pb.WatchSessionNotificationsResponse
	for req == nil || req.GetMethod() == "notifications/message" { // late warm-up logs
		select {
		case req = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the session request did not reach the gateway's watch")
		}
	}
	if req.GetMethod() != "roots/list" || !slices.Equal(req.GetSessions(), []string{s}) ||
		!strings.HasSuffix(req.GetRequestId(), "."+e.w.Name()) {
		t.Fatalf("request %v; want roots/list for %s under an id naming %s", req, s, e.w.Name())
	}
	forged := strings.TrimSuffix(req.GetRequestId(), e.w.Name()) + "another-worker"
	e.w.NotifySession(s, "notifications/cancelled", map[string]string{"requestId": forged})
	giveUp()
	if err := <-asked; !errors.Is(err, context.Canceled) {
		t.Fatalf("AskSession = %v, want it given up", err)
	}
	select {
	case m := <-got:
		if m.GetMethod() != "notifications/cancelled" || !jsonHas(m.GetParamsJson(), "requestId", req.GetRequestId()) {
			t.Fatalf("after the forged cancellation and the real one, the gateway heard %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker's own cancellation did not reach the gateway's watch")
	}
}
