package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// tracedCommands are the commands that run parts of the system; they
// trace when the OTEL_* environment asks (internal/telemetry). One-shot
// commands (call, audit, …) do not.
var tracedCommands = []string{"dev", "gateway", "coordinator", "worker", "console"}

// startTelemetry sets up tracing for the command name and returns what
// flushes it, which reports a failed flush on stderr.
func startTelemetry(ctx context.Context, s cmdline.Streams, name string) (func(), error) {
	if !slices.Contains(tracedCommands, name) {
		return func() {}, nil
	}
	stop, err := telemetry.Setup(ctx, telemetry.Options{Service: "mcpcancel-" + name, Version: cmdline.Version(), Console: s.Stderr})
	if err != nil {
		return nil, err
	}
	return func() {
		if err := stop(); err != nil {
			fmt.Fprintf(s.Stderr, "mcpcancel %s: %v\n", name, err)
		}
	}, nil
}
