package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpcancel/mcpcancel/worker"
)

// A worker offering one event type of the events extension, "tick", by
// push: each events/stream is a call whose handler sends the client a
// notifications/events/event a second until the call is cancelled (the
// client closed its stream, or sent notifications/cancelled), when its
// context ends and nothing more goes out.
func ExampleCall_Notify() {
	w := worker.New(worker.Options{Coordinator: os.Getenv("MCPCANCEL_COORDINATOR")}) // where the coordinator listens
	tick := &worker.EventType{Name: "tick", JSON: json.RawMessage(
		`{"name":"tick","description":"Fires every second","delivery":["push"],"inputSchema":{"type":"object"},"payloadSchema":{"type":"object"}}`)}
	w.SetOffers(worker.Offers{Events: []*worker.EventType{tick}}, func(ctx context.Context, c *worker.Call) (any, error) {
		if c.Method != worker.MethodEventsStream {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: c.Method + " is not offered"}
		}
		c.Notify("notifications/events/active", json.RawMessage(`{"truncated":false}`))
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return nil, ctx.Err() // cancelled: nothing goes out
			case now := <-time.After(time.Second):
				c.Notify("notifications/events/event", json.RawMessage(fmt.Sprintf(
					`{"eventId":"tick-%d","name":"tick","timestamp":%q,"data":{"n":%d}}`, i, now.UTC().Format(time.RFC3339), i)))
			}
		}
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx, lis); err != nil {
		log.Fatal(err)
	}
}
