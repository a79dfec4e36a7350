package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/dial"
)

// remoteCancelMax caps the remote cancel samples: each waits for its
// audit record's stopped_at, which the coordinator writes in batches
// 100 ms apart.
const remoteCancelMax = 200

// measureRemote measures what an existing deployment allows from outside:
// throughput through its gateway beside a plain server here, and cancel
// propagation timed from the client's cancel to the audit's stopped_at.
// Everything else needs the local system (see the README).
func measureRemote(ctx context.Context, c config, r *result, progress progressFunc) error {
	r.Skipped = append(r.Skipped,
		"floor, commits per call and the etcd ceiling: need etcd itself (run without --mcp)",
		"cancel propagation on stdio and 2026-07-28 HTTP: need the local system (run without --mcp)",
		"memory and storm: need each component's admin endpoint and a worker that can be emptied (run without --mcp)")
	hc := benchHTTPClient(2 * c.clients)
	if c.runs("cancel") {
		conn, err := dial.New(c.coordinator)
		if err != nil {
			return err
		}
		defer conn.Close()
		n := min(c.cancelN, remoteCancelMax)
		progress("cancel propagation, http2025, against %s: %d cancels of sleep, timed to the audit's stopped_at", c.mcpURL, n)
		ds, err := remoteCancels(ctx, pb.NewCoordinatorServiceClient(conn), c.mcpURL, hc, n)
		if err != nil {
			return fmt.Errorf("remote cancels after %d: %w", len(ds), err)
		}
		r.setCancel("http2025", summarise(ds))
		r.Notes = append(r.Notes, "remote cancel latency is the client's cancel to the audit's stopped_at (the handler returned), on two clocks: exact only when the bench runs on the worker's host")
	}
	if c.runs("throughput") {
		return measureThroughput(ctx, c, r, c.mcpURL, hc, nil, progress) // no etcd, no components here
	}
	return nil
}

// remoteCancels cancels n sleep calls, one at a time, each once its first
// progress notification shows the handler running; the handler side is
// the audit record's stopped_at.
func remoteCancels(ctx context.Context, coord pb.CoordinatorServiceClient, url string, hc *http.Client, n int) ([]time.Duration, error) {
	progressed := make(chan any, 64)
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpcancel-bench", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- r.Params.ProgressToken:
			default:
			}
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, &mcp.ClientSessionOptions{ProtocolVersion: protocol2025})
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	scope := "session:" + cs.ID()
	seen := map[string]bool{} // call ids already measured
	var out []time.Duration
	for i := range n {
		d, err := remoteCancel(ctx, coord, cs, scope, "bench-"+strconv.Itoa(i), progressed, seen)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

func remoteCancel(ctx context.Context, coord pb.CoordinatorServiceClient, cs *mcp.ClientSession, scope, tok string, progressed <-chan any, seen map[string]bool) (time.Duration, error) {
	since := time.Now().Add(-time.Second) // settled_at is the coordinator's clock
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 60, "steps": 600}}
	params.SetProgressToken(tok)
	errc := make(chan error, 1)
	go func() { _, err := cs.CallTool(cctx, params); errc <- err }()
	t := time.NewTimer(callTimeout)
	defer t.Stop()
	for started := false; !started; {
		select {
		case got := <-progressed:
			started = got == tok
		case err := <-errc:
			return 0, fmt.Errorf("sleep ended before its first progress: %v", err)
		case <-t.C:
			return 0, errors.New("no progress from sleep within 30s")
		}
	}
	start := time.Now()
	cancel()
	<-errc
	for {
		rec, err := cancelledRecord(ctx, coord, scope, since, seen)
		if err != nil {
			return 0, err
		}
		if rec != nil {
			seen[rec.GetCallId()] = true
			return rec.GetStoppedAt().AsTime().Sub(start), nil
		}
		select {
		case <-t.C:
			return 0, errors.New("no cancelled audit record with stopped_at within 30s")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// cancelledRecord is the scope's cancelled sleep settled since and not
// seen before, once its stopped_at is recorded.
func cancelledRecord(ctx context.Context, coord pb.CoordinatorServiceClient, scope string, since time.Time, seen map[string]bool) (*pb.AuditRecord, error) {
	resp, err := coord.ListAudit(ctx, &pb.ListAuditRequest{Since: timestamppb.New(since), Tool: "sleep", Outcome: "cancelled", PageSize: 1000})
	if err != nil {
		return nil, err
	}
	for _, a := range resp.GetRecords() {
		if a.GetScope() == scope && a.GetStoppedAt() != nil && !seen[a.GetCallId()] {
			return a, nil
		}
	}
	return nil, nil
}
