package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callTimeout bounds every single wait of the benchmark; nothing in a
// healthy system comes near it.
const callTimeout = 30 * time.Second

// measureCancels runs n probe calls one after another on cs; once each
// handler has started it cancels the client's context (the Go SDK then
// writes notifications/cancelled, or on 2026-07-28 HTTP closes the
// request's stream) and records the time from that cancel until the
// handler's context is done on the worker.
func measureCancels(ctx context.Context, cs *mcp.ClientSession, ps *probes, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		d, err := oneCancel(ctx, cs, ps)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

func oneCancel(ctx context.Context, cs *mcp.ClientSession, ps *probes) (time.Duration, error) {
	tok, p := ps.add()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: probeTool.Name, Arguments: map[string]any{"token": tok}})
		errc <- err
	}()
	t := time.NewTimer(callTimeout)
	defer t.Stop()
	select {
	case <-p.started:
	case err := <-errc:
		return 0, fmt.Errorf("probe call ended before its handler started: %v", err)
	case <-t.C:
		return 0, errors.New("probe handler did not start within 30s")
	}
	start := time.Now()
	cancel()
	var d time.Duration
	select {
	case at := <-p.done:
		d = at.Sub(start)
	case <-t.C:
		return 0, errors.New("probe handler's context not done within 30s of the cancel")
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		return 0, fmt.Errorf("cancelled call returned %v, want context.Canceled", err)
	}
	return d, nil
}
