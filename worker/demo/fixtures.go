package demo

import "github.com/mcpcancel/mcpcancel/worker"

// RegisterFixtures registers the tools the MCP conformance suite calls.
func RegisterFixtures(w *worker.Worker) {}
