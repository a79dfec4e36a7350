package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// commitCounter reads how many Raft proposals etcd has committed, from
// etcd's own /metrics (etcd_server_proposals_committed_total, served on its
// client URL), and the store's revision. A proposal is one Raft commit:
// every write Txn (including one whose compare failed), lease grant and
// revoke; linearizable reads and lease keep-alives are not proposals. The
// revision moves only for Txns that changed keys, so it undercounts
// failed CASes and lease operations.
type commitCounter struct {
	metricsURL string
	cli        *clientv3.Client
	hc         *http.Client
}

type commitMark struct {
	proposals float64
	revision  int64
}

func (c *commitCounter) mark(ctx context.Context) (commitMark, error) {
	p, err := c.proposals(ctx)
	if err != nil {
		return commitMark{}, err
	}
	resp, err := c.cli.Get(ctx, "/bench/revision-probe")
	if err != nil {
		return commitMark{}, err
	}
	return commitMark{proposals: p, revision: resp.Header.Revision}, nil
}

func (c *commitCounter) proposals(ctx context.Context) (float64, error) {
	return gauge(ctx, c.hc, c.metricsURL, "etcd_server_proposals_committed_total")
}

// metricValue finds an unlabelled sample in Prometheus text format.
func metricValue(sc *bufio.Scanner, name string) (float64, error) {
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			f := strings.Fields(rest)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// settle waits until etcd has committed nothing for quiet (the
// coordinator batches stop records for 100 ms), at most limit, and
// returns the mark then.
func (c *commitCounter) settle(ctx context.Context, quiet, limit time.Duration) (commitMark, error) {
	deadline := time.Now().Add(limit)
	last, err := c.mark(ctx)
	if err != nil {
		return last, err
	}
	since := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Since(since) < quiet && time.Now().Before(deadline) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return last, ctx.Err()
		}
		m, err := c.mark(ctx)
		if err != nil {
			return last, err
		}
		if m.proposals != last.proposals {
			last, since = m, time.Now()
		}
	}
	return last, nil
}

func (a commitMark) perCall(b commitMark, calls int) (proposals, revisions float64) {
	if calls == 0 {
		return 0, 0
	}
	return round((a.proposals-b.proposals)/float64(calls), 3), round(float64(a.revision-b.revision)/float64(calls), 3)
}
