package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// measureAddedLatency times echo calls made one at a time by one session
// on the gateway and one on the plain Go SDK server, call by call in
// turn, and reports what the gateway adds at p50 and p99.
func measureAddedLatency(ctx context.Context, c config, r *result, url string, hc *http.Client, progress progressFunc) error {
	plain, err := startPlain()
	if err != nil {
		return err
	}
	defer plain.close()
	progress("added latency: %d echo calls by one session, the gateway's and the plain server's in turn", c.floorN)
	d, err := alternateLatency(ctx, c.floorN, hc, echo, url, plain.url)
	if err != nil {
		return fmt.Errorf("added latency: %w", err)
	}
	gw, pl := summarise(d[0]), summarise(d[1])
	r.LatencyCalls = gw.N
	r.GatewayLatencyP50, r.GatewayLatencyP99 = ms(gw.P50), ms(gw.P99)
	r.PlainLatencyP50, r.PlainLatencyP99 = ms(pl.P50), ms(pl.P99)
	r.AddedLatencyP50, r.AddedLatencyP99 = ms(gw.P50-pl.P50), ms(gw.P99-pl.P99)
	return nil
}

// alternateLatency opens one session on each url and times n calls on
// each, one call per session in turn, so the machine's other load falls
// on all of them alike.
func alternateLatency(ctx context.Context, n int, hc *http.Client, call callFunc, urls ...string) ([][]time.Duration, error) {
	var sessions []*mcp.ClientSession
	defer func() {
		for _, cs := range sessions {
			cs.Close()
		}
	}()
	for _, u := range urls {
		cs, err := httpSession(ctx, u, protocol2025, hc)
		if err != nil {
			return nil, err
		}
		sessions = append(sessions, cs)
		if err := call(ctx, cs); err != nil { // warm up
			return nil, err
		}
	}
	out := make([][]time.Duration, len(urls))
	for range n {
		for i, cs := range sessions {
			start := time.Now()
			if err := call(ctx, cs); err != nil {
				return nil, fmt.Errorf("%s: %w", urls[i], err)
			}
			out[i] = append(out[i], time.Since(start))
		}
	}
	return out, nil
}
