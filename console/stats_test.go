package console

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

func record(outcome string, initiator pb.Initiator, requested, settled time.Time, stopAfter time.Duration) *pb.AuditRecord {
	r := &pb.AuditRecord{Outcome: outcome, Initiator: initiator, RequestedAt: timestamppb.New(requested), SettledAt: timestamppb.New(settled)}
	if stopAfter >= 0 {
		r.StoppedAt = timestamppb.New(settled.Add(stopAfter))
	}
	return r
}

// TestBuildStats buckets a window's records, running calls and workers as
// the charts draw them.
func TestBuildStats(t *testing.T) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now := start.Add(statsWindow)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	recs := []*pb.AuditRecord{
		record("completed", pb.Initiator_INITIATOR_UNSPECIFIED, at(time.Second), at(1500*time.Millisecond), 0),
		record("completed", pb.Initiator_INITIATOR_UNSPECIFIED, at(2*time.Second), at(3*time.Second), -1), // stop not yet reported
		record("cancelled", pb.Initiator_INITIATOR_CLIENT, at(10*time.Second), at(40*time.Second), 30*time.Millisecond),
		record("cancel_lost", pb.Initiator_INITIATOR_CLIENT, at(time.Second), at(4*time.Second), -1),
	}
	running := []*pb.RunningCall{{Call: &pb.Call{RequestedAt: timestamppb.New(at(20 * time.Second))}}}
	workers := []*pb.WorkerInfo{{Name: "w2", InFlight: 1}, {Name: "w1", InFlight: 2, Capacity: 4}}
	st := buildStats(now, start, recs, running, workers)

	n := int(statsWindow/statsStep) + 1
	if len(st.InFlight) != n || st.StepMs != statsStep.Milliseconds() || st.Start != start.UnixMilli() || st.Records != 4 {
		t.Fatalf("stats frame: %d buckets of %dms from %d, %d records", len(st.InFlight), st.StepMs, st.Start, st.Records)
	}
	// Bucket 0 ends at 5s: both completed calls have ended. The cancelled
	// call runs 10s..40s and the running one from 20s, so buckets 1..8
	// (ending at 10s..45s) hold 1 1 2 2 2 2 1 1, and the last just it.
	if want := []int{0, 1, 1, 2, 2, 2, 2, 1, 1}; !slices.Equal(st.InFlight[:9], want) || st.InFlight[n-1] != 1 {
		t.Errorf("in flight %v ... %d, want %v ... 1", st.InFlight[:9], st.InFlight[n-1], want)
	}
	if got := st.Outcomes["completed"]; got[0] != 2 || sum(got) != 2 {
		t.Errorf("completed per bucket %v, want 2 in the first", got)
	}
	if sum(st.Outcomes["cancelled"]) != 1 || st.Outcomes["cancelled"][8] != 1 || sum(st.Outcomes["cancel_lost"]) != 1 {
		t.Errorf("outcomes %v", st.Outcomes)
	}
	if sum(st.Initiators["none"]) != 2 || sum(st.Initiators["client"]) != 1 || len(st.Initiators) != 2 {
		t.Errorf("initiators %v, want none 2 and client 1 (cancel_lost is no decision)", st.Initiators)
	}
	if sum(st.StopLatency.Counts) != 2 || st.StopLatency.Counts[0] != 1 || st.StopLatency.Counts[5] != 1 {
		t.Errorf("stop latency %v, want one at 0 and one at 30ms (<= 50ms)", st.StopLatency.Counts)
	}
	if sum(st.Duration.Counts) != 3 || st.Duration.Counts[8] != 1 || st.Duration.Counts[9] != 1 || st.Duration.Counts[13] != 1 {
		t.Errorf("durations %v, want 500ms, 1s and 30s", st.Duration.Counts)
	}
	if !slices.Equal(st.Workers, []workerLoad{{"w1", 2, 4, false}, {"w2", 1, 0, false}}) {
		t.Errorf("workers %v", st.Workers)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestPicture lays a call's timed steps out to scale, the first at the
// axis' start and the last at its end, and leaves out untimed steps.
func TestPicture(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ptr := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	steps := []step{
		{"requested", ptr(0), ""}, {"placed", ptr(0), ""}, {"cancel asked", nil, ""},
		{"decided", ptr(100 * time.Millisecond), ""}, {"handler stopped", ptr(400 * time.Millisecond), ""},
	}
	p := newPicture(steps, false, t0.Add(time.Hour))
	var whats []string
	for _, m := range p.Marks {
		whats = append(whats, m.What)
	}
	if !slices.Equal(whats, []string{"requested", "decided", "handler stopped"}) {
		t.Fatalf("marks %v", whats)
	}
	if p.Marks[0].X != p.X0 || p.Marks[2].X != p.X1 || p.Marks[1].X != p.X0+(p.X1-p.X0)/4 || p.Span != "400ms" {
		t.Errorf("marks at %d %d %d on %d..%d, span %s; want to scale", p.Marks[0].X, p.Marks[1].X, p.Marks[2].X, p.X0, p.X1, p.Span)
	}
	if p.Marks[1].Class != "decided" || p.Marks[2].Class != "stopped" || p.Marks[2].At != "+400ms" {
		t.Errorf("marks %+v", p.Marks)
	}
	if r := newPicture(steps[:1], true, t0.Add(time.Second)); len(r.Marks) != 2 || r.Marks[1].What != "now (running)" {
		t.Errorf("a running call's picture %+v, want it to end at now", r)
	}
	if newPicture([]step{{"decided", nil, ""}}, false, t0) != nil {
		t.Errorf("a picture with no time on record")
	}
}

// BenchmarkBuildStats: the charts' data from a full window
// (maxStatsRecords records), as each live page computes it every
// statsEvery.
func BenchmarkBuildStats(b *testing.B) {
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now := start.Add(statsWindow)
	recs := make([]*pb.AuditRecord, maxStatsRecords)
	for i := range recs {
		at := start.Add(time.Duration(i) * statsWindow / maxStatsRecords)
		recs[i] = record("completed", pb.Initiator_INITIATOR_UNSPECIFIED, at, at.Add(time.Second), time.Millisecond)
	}
	for b.Loop() {
		buildStats(now, start, recs, nil, nil)
	}
}
