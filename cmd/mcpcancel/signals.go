package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
)

// onSignals returns a context that the first SIGINT or SIGTERM ends, so
// the command stops gracefully; a second one calls exit(130) at once.
// stop releases the signals and waits for the watcher it started.
func onSignals(parent context.Context, stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	ctx, stopNotify := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done, watched := make(chan struct{}), make(chan struct{})
	go func() { // owned by stop, which waits for it
		defer close(watched)
		countSignals(sigs, done, stderr, exit)
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		<-watched
		stopNotify()
	}
}

// countSignals tells the user what the first signal does and exits on
// the second.
func countSignals(sigs <-chan os.Signal, done <-chan struct{}, stderr io.Writer, exit func(int)) {
	for n := 1; ; n++ {
		select {
		case <-done:
			return
		case sig := <-sigs:
			if n == 1 {
				fmt.Fprintf(stderr, "mcpcancel: %v: shutting down; signal again to exit at once\n", sig)
				continue
			}
			fmt.Fprintf(stderr, "mcpcancel: %v again: exiting at once\n", sig)
			exit(cmdline.ExitInterrupted)
			return
		}
	}
}
