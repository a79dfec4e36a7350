package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// committerEnv is a committer on a real single-member etcd. Its run loop
// starts only when start is called, so that a test can queue decisions
// first and know which batches they form.
type committerEnv struct {
	t    testing.TB
	cli  *clientv3.Client
	c    *committer
	stop func()
}

func newCommitterEnv(t testing.TB) *committerEnv {
	cli := etcdtest.Single(t).Client()
	return &committerEnv{t: t, cli: cli, c: newCommitter(cli, 5*time.Second)}
}

func (e *committerEnv) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.c.run(ctx) }()
	e.stop = func() { cancel(); <-done }
	e.t.Cleanup(e.stop)
}

func (e *committerEnv) revision() int64 {
	e.t.Helper()
	resp, err := e.cli.Get(e.t.Context(), "/revision-probe")
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.Revision
}

// queue submits a decision without waiting for it, as Commit does.
func (e *committerEnv) queue(cmps []clientv3.Cmp, then, els []clientv3.Op) *commitReq {
	e.t.Helper()
	r := &commitReq{cmps: cmps, then: then, els: els, done: make(chan struct{})}
	r.measure()
	if err := e.c.enqueue(r); err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *committerEnv) answer(r *commitReq) (*clientv3.TxnResponse, error) {
	select {
	case <-r.done:
		return r.resp, r.err
	case <-e.t.Context().Done():
		e.t.Fatal("no answer")
		return nil, nil
	}
}

// free is a decision on a key nobody wrote yet: it succeeds.
func free(key string, extra ...clientv3.Op) ([]clientv3.Cmp, []clientv3.Op, []clientv3.Op) {
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", 0)},
		append([]clientv3.Op{clientv3.OpPut(key, "v")}, extra...),
		[]clientv3.Op{clientv3.OpGet(key)}
}

func (e *committerEnv) queueFree(key string) *commitReq { return e.queue(free(key)) }

func (e *committerEnv) wantWon(r *commitReq, want bool) *clientv3.TxnResponse {
	e.t.Helper()
	resp, err := e.answer(r)
	if err != nil {
		e.t.Fatalf("decision on %q: %v", r.reads[0], err)
	}
	if resp.Succeeded != want {
		e.t.Fatalf("decision on %q: succeeded %v, want %v", r.reads[0], resp.Succeeded, want)
	}
	return resp
}

// Decisions queued together go out as one Txn: one revision for all,
// each with the batch's revision and its own Succeeded.
func TestGroupCommitBatchesQueuedDecisions(t *testing.T) {
	e := newCommitterEnv(t)
	before := e.revision()
	var rs []*commitReq
	for i := range 40 {
		rs = append(rs, e.queueFree(fmt.Sprintf("/k/%d", i)))
	}
	e.start()
	for _, r := range rs {
		if resp := e.wantWon(r, true); resp.Header.Revision != before+1 {
			t.Errorf("decision at revision %d, want the batch's %d", resp.Header.Revision, before+1)
		}
	}
	if got := e.revision() - before; got != 1 {
		t.Errorf("40 queued decisions took %d commits, want 1", got)
	}
}

// Concurrent callers through the Txn face share commits: fewer revisions
// than decisions, and every one of them answered and written.
func TestGroupCommitConcurrentCallersShareTxns(t *testing.T) {
	e := newCommitterEnv(t)
	e.start()
	before := e.revision()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			k := fmt.Sprintf("/c/%d", i)
			resp, err := e.c.Txn(t.Context()).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, "v")).Commit()
			switch {
			case err != nil:
				errs <- err
			case !resp.Succeeded:
				errs <- fmt.Errorf("%s: guard failed", k)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	commits := e.revision() - before
	if commits >= n {
		t.Errorf("%d concurrent decisions took %d commits, want fewer", n, commits)
	}
	got, err := e.cli.Get(t.Context(), "/c/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || got.Count != n {
		t.Errorf("%v keys written (%v), want %d", got.Count, err, n)
	}
	t.Logf("%d decisions in %d commits", n, commits)
}

// Two decisions on one key never share a Txn: the second waits for the
// next batch and sees the first's write, so its guard fails.
func TestGroupCommitDuplicateKeysGoInSeparateBatches(t *testing.T) {
	e := newCommitterEnv(t)
	before := e.revision()
	first, other, second := e.queueFree("/dup"), e.queueFree("/other"), e.queueFree("/dup")
	e.start()
	r1, ro := e.wantWon(first, true), e.wantWon(other, true)
	r2 := e.wantWon(second, false)
	if r1.Header.Revision != ro.Header.Revision {
		t.Errorf("revisions first %d, other %d: want them in one batch", r1.Header.Revision, ro.Header.Revision)
	}
	if kvs := r2.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || kvs[0].ModRevision != r1.Header.Revision {
		t.Errorf("second decision's else read %v, want the first's write", kvs)
	}
	if got := e.revision() - before; got != 1 { // the second wrote nothing
		t.Errorf("%d revisions, want 1", got)
	}
}

// Decisions that only compare a key in common (Begins on one worker all
// compare its key) share a batch; one that writes a key another in the
// batch compares waits for the next, and sees that write.
func TestGroupCommitSharedReadsBatchTogether(t *testing.T) {
	e := newCommitterEnv(t)
	put, err := e.cli.Put(t.Context(), "/worker", "w")
	if err != nil {
		t.Fatal(err)
	}
	alive := clientv3.Compare(clientv3.CreateRevision("/worker"), "=", put.Header.Revision)
	var begins []*commitReq
	for i := range 3 {
		k := fmt.Sprintf("/call/%d", i)
		begins = append(begins, e.queue([]clientv3.Cmp{alive}, []clientv3.Op{clientv3.OpPut(k, "v")}, nil))
	}
	gone := e.queue(nil, []clientv3.Op{clientv3.OpDelete("/worker")}, nil)
	// Queued after the delete but concurrent with it, it may go first,
	// with the batch the delete could not join.
	late := e.queue([]clientv3.Cmp{alive}, []clientv3.Op{clientv3.OpPut("/call/late", "v")}, nil)
	e.start()
	first := e.wantWon(begins[0], true).Header.Revision
	for _, r := range append(begins[1:], late) {
		if got := e.wantWon(r, true).Header.Revision; got != first {
			t.Errorf("begin at revision %d, want the first's %d", got, first)
		}
	}
	if got := e.wantWon(gone, true).Header.Revision; got != first+1 {
		t.Errorf("the delete of a key the batch compared went in at %d, not next after %d", got, first)
	}
	// Now the delete is in the queue's past: a begin guarded on the worker
	// fails.
	after := e.queue([]clientv3.Cmp{alive}, []clientv3.Op{clientv3.OpPut("/call/after", "v")}, nil)
	e.wantWon(after, false)
}

// A guard that fails in one nested Txn runs that Txn's else and leaves
// the other decisions in the batch committed.
func TestGroupCommitFailedGuardLeavesOthersCommitted(t *testing.T) {
	e := newCommitterEnv(t)
	if _, err := e.cli.Put(t.Context(), "/taken", "old"); err != nil {
		t.Fatal(err)
	}
	before := e.revision()
	a, taken, b := e.queueFree("/a"), e.queueFree("/taken"), e.queueFree("/b")
	e.start()
	e.wantWon(a, true)
	e.wantWon(b, true)
	lost := e.wantWon(taken, false)
	if kvs := lost.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "old" {
		t.Errorf("the failed decision's else read %v, want the value it lost to", kvs)
	}
	for k, want := range map[string]string{"/a": "v", "/b": "v", "/taken": "old"} {
		got, err := e.cli.Get(t.Context(), k)
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != want {
			t.Errorf("%s = %v (%v), want %q", k, got.Kvs, err, want)
		}
	}
	if got := e.revision() - before; got != 1 {
		t.Errorf("%d revisions, want 1", got)
	}
}

// Batches stay within etcd's operation limit as etcd counts it (the
// nested Txns plus the longest nested list), and etcd accepts them.
func TestGroupCommitRespectsTxnOpLimit(t *testing.T) {
	e := newCommitterEnv(t)
	before := e.revision()
	var rs []*commitReq
	for i := range 200 { // four writes each: 124 fit in one Txn
		k := fmt.Sprintf("/ops/%d", i)
		rs = append(rs, e.queue(free(k, clientv3.OpPut(k+"/1", "v"), clientv3.OpPut(k+"/2", "v"), clientv3.OpPut(k+"/3", "v"))))
	}
	e.start()
	for _, r := range rs {
		e.wantWon(r, true)
	}
	if got := e.revision() - before; got != 2 {
		t.Errorf("200 decisions of 4 ops took %d commits, want 2 (124 + 76)", got)
	}
}

// Batches stay under etcd's request size limit.
func TestGroupCommitRespectsRequestBytes(t *testing.T) {
	e := newCommitterEnv(t)
	before := e.revision()
	big := strings.Repeat("x", 300<<10)
	var rs []*commitReq
	for i := range 5 { // 3 fit in maxBatchBytes
		k := fmt.Sprintf("/big/%d", i)
		rs = append(rs, e.queue([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", 0)}, []clientv3.Op{clientv3.OpPut(k, big)}, nil))
	}
	e.start()
	for _, r := range rs {
		e.wantWon(r, true)
	}
	if got := e.revision() - before; got != 2 {
		t.Errorf("5 decisions of 300 KiB took %d commits, want 2", got)
	}
}

// A batch etcd refuses outright (here: one decision names a lease etcd
// does not know) is resent a decision at a time: the bad one gets etcd's
// error, the others commit.
func TestGroupCommitRejectedBatchIsResentAlone(t *testing.T) {
	e := newCommitterEnv(t)
	good1 := e.queueFree("/good/1")
	bad := e.queue([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision("/bad"), "=", 0)},
		[]clientv3.Op{clientv3.OpPut("/bad", "v", clientv3.WithLease(clientv3.LeaseID(0x7777)))}, nil)
	good2 := e.queueFree("/good/2")
	e.start()
	e.wantWon(good1, true)
	e.wantWon(good2, true)
	if _, err := e.answer(bad); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("bad decision: %v, want lease not found", err)
	}
}

// A caller that gives up before its decision is taken withdraws it.
func TestGroupCommitWithdrawnDecisionIsNotWritten(t *testing.T) {
	e := newCommitterEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cmps, then, els := free("/withdrawn")
	if _, err := e.c.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a cancelled context: %v", err)
	}
	later := e.queueFree("/later")
	e.start()
	e.wantWon(later, true)
	if got, err := e.cli.Get(t.Context(), "/withdrawn"); err != nil || len(got.Kvs) != 0 {
		t.Errorf("withdrawn decision written: %v %v", got.Kvs, err)
	}
}

// Once run has returned, queued and new decisions fail as etcd
// unavailable, and none waits forever.
func TestGroupCommitStopped(t *testing.T) {
	e := newCommitterEnv(t)
	queued := e.queueFree("/queued")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := e.c.run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run = %v", err)
	}
	if _, err := e.answer(queued); !errors.Is(err, ErrEtcd) {
		t.Errorf("queued decision: %v, want ErrEtcd", err)
	}
	cmps, then, _ := free("/late")
	if _, err := e.c.Txn(t.Context()).If(cmps...).Then(then...).Commit(); !errors.Is(err, ErrEtcd) {
		t.Errorf("decision after stop: %v, want ErrEtcd", err)
	}
}

// BenchmarkGroupCommit makes concurrent settle-shaped decisions (a guard
// and four writes on keys of their own) on an etcd with fsync on, each
// as its own Txn (direct) or through the committer (group), and reports
// etcd commits per decision beside the time. Compare with benchstat:
//
//	go test ./coordinator -run '^$' -bench GroupCommit -count 6 -cpu 2
func BenchmarkGroupCommit(b *testing.B) {
	for _, mode := range []string{"direct", "group"} {
		b.Run(mode, func(b *testing.B) {
			cli := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true}).Client()
			c := newCommitter(cli, 5*time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.run(ctx) }()
			defer func() { cancel(); <-done }()
			txn := map[string]func(context.Context) clientv3.Txn{"direct": cli.Txn, "group": c.Txn}[mode]
			before, err := cli.Get(b.Context(), "/probe")
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores: the throughput run's 64 clients
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := fmt.Sprintf("/b/%d", next.Add(1))
					resp, err := txn(b.Context()).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
						Then(clientv3.OpPut(k, "call"), clientv3.OpPut(k+"/audit", "audit"), clientv3.OpDelete(k+"/owner"), clientv3.OpDelete(k+"/running")).
						Else(clientv3.OpGet(k)).Commit()
					if err != nil || !resp.Succeeded {
						b.Errorf("decision %s: %v", k, err)
						return
					}
				}
			})
			b.StopTimer()
			after, err := cli.Get(b.Context(), "/probe")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(after.Header.Revision-before.Header.Revision)/float64(b.N), "commits/op")
		})
	}
}
