package upstream_test

import (
	"context"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// subscriber is a 2025-era Go SDK client of the gateway counting the
// resource updates it hears, by URI.
type subscriber struct {
	*mcp.ClientSession
	mu      sync.Mutex
	updates map[string]int
}

func (st *stack) subscriber(t *testing.T) *subscriber {
	t.Helper()
	s := &subscriber{updates: map[string]int{}}
	c := mcp.NewClient(&mcp.Implementation{Name: "subscribe-test", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			s.mu.Lock()
			s.updates[r.Params.URI]++
			s.mu.Unlock()
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: st.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	s.ClientSession = cs
	return s
}

func (s *subscriber) count(uri string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for u, c := range s.updates {
		if uri == "" || u == uri {
			n += c
		}
	}
	return n
}

// TestSubscribeUpdatesReachOnlySubscribers: behind the gateway, a client
// subscribes to one of server-everything's resources and turns its
// simulated updates on; it hears notifications/resources/updated for that
// resource, and another client, which also turned updates on but
// subscribed to nothing, hears none; a third that subscribed to another
// resource hears only that one's. With per-client upstream sessions the
// server itself tells the sessions apart; with a shared connection the
// coordinator's subscriptions do.
func TestSubscribeUpdatesReachOnlySubscribers(t *testing.T) {
	const doc, other = "demo://resource/static/document/architecture.md", "demo://resource/static/document/features.md"
	for _, mode := range []upstream.SessionMode{upstream.PerClient, upstream.Shared} {
		t.Run(string(mode), func(t *testing.T) {
			st := startStack(t, upstream.Options{Command: []string{"node", everything(t), "stdio"}, Sessions: mode}, "toggle-subscriber-updates")
			sub, bystander, elsewhere := st.subscriber(t), st.subscriber(t), st.subscriber(t)
			if err := sub.Subscribe(t.Context(), &mcp.SubscribeParams{URI: doc}); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			if err := elsewhere.Subscribe(t.Context(), &mcp.SubscribeParams{URI: other}); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			for _, c := range []*subscriber{sub, bystander, elsewhere} {
				if mode == upstream.Shared && c != sub {
					break // one shared upstream session: a second toggle would turn updates off
				}
				if _, err := c.CallTool(t.Context(), &mcp.CallToolParams{Name: "toggle-subscriber-updates", Arguments: map[string]any{}}); err != nil {
					t.Fatal(err)
				}
			}
			// Updates come at once, then every 5 s.
			testcluster.WaitFor(t, "updates at both subscribers", func() bool { return sub.count(doc) >= 1 && elsewhere.count(other) >= 1 })
			if n := bystander.count(""); n != 0 {
				t.Fatalf("a client that subscribed to nothing heard %d updates", n)
			}
			if n := sub.count(other); n != 0 {
				t.Fatalf("the subscriber heard %d updates of a resource it did not subscribe to", n)
			}
			if n := elsewhere.count(doc); n != 0 {
				t.Fatalf("the other subscriber heard %d updates of a resource it did not subscribe to", n)
			}
		})
	}
}
