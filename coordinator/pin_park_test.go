package coordinator_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

// A call pinned to a worker (a 2026-07-28 retry resuming the call parked
// there) is placed on that worker alone, by Begin and by Start; a pin to a
// worker that is gone or does not serve the target is refused with
// NOT_RETRYABLE and no write, never placed elsewhere.
func TestPinnedPlacement(t *testing.T) {
	e := retryEnv(t) // i1 and i2 both offer idem; i2 does not offer hold
	var n int64
	next := func() *pb.CallKey { n++; return key("stream:p", num(n)) }
	for range 12 {
		b, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: next(), Tool: "idem", Principal: "alice", Gateway: "g1", PinWorker: "i2"})
		if err != nil || b.GetWorker() != "i2" {
			t.Fatalf("pinned Begin = %v on %q, %v; want placed on i2", b, b.GetWorker(), err)
		}
	}
	for _, tc := range []struct{ pin, tool, want string }{
		{"gone", "idem", "gone or draining"},
		{"i2", "hold", "no longer serves"},
	} {
		before := e.revision(t)
		_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: next(), Tool: tc.tool, Principal: "alice", Gateway: "g1", PinWorker: tc.pin})
		if status.Code(err) != codes.FailedPrecondition || coordinator.ErrorReason(err) != "NOT_RETRYABLE" || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Begin pinned to %s for %s = %v (reason %q); want NOT_RETRYABLE saying %q", tc.pin, tc.tool, err, coordinator.ErrorReason(err), tc.want)
		}
		if after := e.revision(t); after != before {
			t.Fatalf("a refused pinned Begin wrote to etcd (revision %d → %d)", before, after)
		}
	}
	_, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: next(), Tool: "idem", Principal: "alice", Gateway: "g1", PinWorker: "i2", RetryOf: "0123456789abcdef0123456789abcdef"})
	if coordinator.ErrorReason(err) != "INVALID_ARGUMENT" {
		t.Fatalf("a pinned retry of a lost call = %v; want INVALID_ARGUMENT", err)
	}
}
