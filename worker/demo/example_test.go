package demo_test

import (
	"context"
	"log"
	"net"
	"os"
	"os/signal"

	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/demo"
)

// A worker that serves the demo tools until interrupted, as
// `mcpcancel worker --demo` does.
func ExampleRegister() {
	w := worker.New(worker.Options{Coordinator: "127.0.0.1:7801"})
	demo.Register(w)

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
