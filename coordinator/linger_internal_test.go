package coordinator

import (
	"testing"
	"time"
)

// A Begin lingers only for a target whose calls lately ended within a
// commit's time, twice their typical time and at most a commit; not
// before enough of either was seen; and not once the target slows.
func TestQuicknessLinger(t *testing.T) {
	var q quickness
	for range minQuickSamples {
		q.committed(2 * time.Millisecond)
	}
	if got := q.linger("tools/call echo"); got != 0 {
		t.Fatalf("linger with no calls seen = %v, want 0", got)
	}
	for range minQuickSamples {
		q.completed("tools/call echo", 300*time.Microsecond)
		q.completed("tools/call nearly", 1500*time.Microsecond)
		q.completed("tools/call slow", time.Second)
	}
	for target, want := range map[string]time.Duration{
		"tools/call echo":   600 * time.Microsecond,
		"tools/call nearly": 2 * time.Millisecond, // capped at a commit
		"tools/call slow":   0,
		"tools/call never":  0,
	} {
		if got := q.linger(target); got != want {
			t.Errorf("linger(%s) = %v, want %v", target, got, want)
		}
	}
	for range 20 {
		q.completed("tools/call echo", 10*time.Millisecond)
	}
	if got := q.linger("tools/call echo"); got != 0 {
		t.Fatalf("linger of a target that slowed = %v, want 0", got)
	}
}

// A decision claims a lingering Begin once: the Begin stops lingering at
// the claim and goes once the decision tried, learning whether the
// decision created the record (then it need not go to etcd); a second
// decision, or one after the Begin went, gets no claim.
func TestClaimFirst(t *testing.T) {
	for _, created := range []bool{false, true} {
		b := &placedBegin{done: make(chan struct{}), claimed: make(chan struct{})}
		went := make(chan bool)
		go func() { went <- b.linger(time.Hour, time.Hour) }() // owned: the test reads went
		tried := b.claimFirst()
		if tried == nil {
			t.Fatal("a decision found no claim on a lingering Begin")
		}
		if b.claimFirst() != nil {
			t.Fatal("two decisions claimed one Begin")
		}
		select {
		case <-went:
			t.Fatal("the Begin went before its claiming decision tried")
		default:
		}
		tried(created)
		tried(!created) // a second call changes nothing
		if settled := <-went; settled != created {
			t.Fatalf("the decision created the record: %v; the Begin heard %v", created, settled)
		}
		if b.claimFirst() != nil {
			t.Fatal("a decision claimed a Begin that went")
		}
	}

	unclaimed := &placedBegin{done: make(chan struct{}), claimed: make(chan struct{})}
	if unclaimed.linger(time.Millisecond, time.Hour) { // the linger passes; nothing to wait for
		t.Fatal("an unclaimed Begin was told its call was settled")
	}
	if unclaimed.claimFirst() != nil {
		t.Fatal("a decision claimed a Begin that went")
	}
}
