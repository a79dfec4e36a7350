package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// A decision that waits in the group-commit queue longer than OpTimeout
// (behind a storm's batches; here, behind a committer not yet running)
// is still committed: OpTimeout bounds the etcd work of its batch, not
// the wait before it. Before, the settle's own OpTimeout ran out in the
// queue and the decision was withdrawn, unwritten, as a timeout.
func TestSettleWaitInQueueIsNotItsOpTimeout(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	const opTimeout = 200 * time.Millisecond
	s := New(Options{Client: cli, OpTimeout: opTimeout})
	rec := &callRecord{CallID: "0123456789abcdef0123456789abcdef", Scope: "conn:t", RequestID: []byte("1"),
		Worker: "w1", State: stateRunning, RequestedAt: time.Now().UTC(), Deadline: time.Now().Add(time.Minute).UTC()}
	key := s.keys.call(rec.CallID)
	if _, err := cli.Put(t.Context(), key, encode(rec)); err != nil {
		t.Fatal(err)
	}
	got, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	kv := got.Kvs[0]

	settled := make(chan error, 1)
	go func() { // owned: the test waits for settled
		_, err := s.settleTxn(t.Context(), rec, kv, decision{state: stateCancelled, initiator: "client", reason: "test"})
		settled <- err
	}()
	testWaitFor(t, "the decision to be queued", func() bool {
		s.commits.mu.Lock()
		defer s.commits.mu.Unlock()
		return len(s.commits.queue) == 1
	})
	// What the test is about: time passing while the decision waits.
	<-time.After(3 * opTimeout)
	select {
	case err := <-settled:
		t.Fatalf("the settle ended while its decision waited in the queue: %v", err)
	default:
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.commits.run(ctx) }()
	defer func() { stop(); <-done }()
	if err := <-settled; err != nil {
		t.Fatalf("settle after waiting in the queue: %v", err)
	}
	after, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	now, err := decode[callRecord]("call", after.Kvs[0].Value)
	if err != nil || now.State != stateCancelled {
		t.Fatalf("call after the settle: %+v %v, want cancelled", now, err)
	}
	if audit, err := cli.Get(t.Context(), now.AuditKey); err != nil || len(audit.Kvs) != 1 {
		t.Fatalf("audit record %q: %v %v", now.AuditKey, audit, err)
	}
}

// testWaitFor polls cond until it holds, failing the test after 15 s.
func testWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
