package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// floorPrefix holds the keys the floor measurements write; nothing of
// mcpcancel reads them.
const floorPrefix = "/bench/floor/"

// measureFloor times n CAS Txns on one key (guarded by its revision, as a
// decision is) and, for each, Put start → the event on a watch opened by
// a second client.
func measureFloor(ctx context.Context, writer, watcher *clientv3.Client, n int) (cas, watch []time.Duration, err error) {
	key := floorPrefix + "k"
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	wch := watcher.Watch(wctx, key)
	put, err := writer.Put(ctx, key, "0")
	if err != nil {
		return nil, nil, err
	}
	if err := nextEvent(wch); err != nil {
		return nil, nil, err
	}
	rev := put.Header.Revision
	for range n {
		start := time.Now()
		resp, err := writer.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, "x")).Commit()
		if err != nil {
			return nil, nil, err
		}
		if !resp.Succeeded {
			return nil, nil, fmt.Errorf("floor: CAS at revision %d failed: someone else wrote %s", rev, key)
		}
		cas = append(cas, time.Since(start))
		if err := nextEvent(wch); err != nil {
			return nil, nil, err
		}
		watch = append(watch, time.Since(start))
		rev = resp.Header.Revision
	}
	return cas, watch, nil
}

func nextEvent(wch clientv3.WatchChan) error {
	for r := range wch {
		if err := r.Err(); err != nil {
			return err
		}
		if len(r.Events) > 0 {
			return nil
		}
	}
	return fmt.Errorf("floor: watch closed")
}

// txnRate is etcd's own rate of CAS Txns with conc concurrent writers on
// distinct keys, over window: what one commit per call would allow. The
// keys are written first, outside the window.
func txnRate(ctx context.Context, cli *clientv3.Client, conc int, window time.Duration) (float64, error) {
	revs := make([]int64, conc)
	for i := range conc {
		put, err := cli.Put(ctx, ceilingKey(i), "0")
		if err != nil {
			return 0, err
		}
		revs[i] = put.Header.Revision
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	start := time.Now()
	deadline := start.Add(window)
	for i := range conc {
		wg.Go(func() {
			if err := casLoop(ctx, cli, ceilingKey(i), revs[i], deadline, &n); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if n.Load() == 0 {
		return 0, fmt.Errorf("ceiling: no Txn committed within %v", window)
	}
	return float64(n.Load()) / elapsed.Seconds(), nil
}

func ceilingKey(i int) string { return fmt.Sprintf("%sc/%d", floorPrefix, i) }

func casLoop(ctx context.Context, cli *clientv3.Client, key string, rev int64, deadline time.Time, n *atomic.Int64) error {
	for time.Now().Before(deadline) {
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, "x")).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("ceiling: CAS on %s failed", key)
		}
		rev = resp.Header.Revision
		n.Add(1)
	}
	return nil
}
