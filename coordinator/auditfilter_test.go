package coordinator_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// TestListAuditFilters decides two calls (alice's cancelled by her
// client, bob's by its timeout) and checks that each of ListAudit's
// filters returns exactly the records it names, applied by the
// coordinator; and that a Begin's trace context lands in the record.
func TestListAuditFilters(t *testing.T) {
	e := newEnv(t, envOptions{})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	traced := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	a, err := e.c.Begin(traced, &pb.BeginRequest{Key: key("s", num(1)), Tool: "hold", Principal: "alice", Gateway: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.cancel(t, e.c, key("s", num(1)), "stop"); r != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel a: %v", r)
	}
	b, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: key("s", num(2)), Tool: "hold", Principal: "bob", Gateway: "g1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: key("s", num(2))}, Initiator: pb.Initiator_INITIATOR_TIMEOUT}); err != nil {
		t.Fatal(err)
	}
	all := e.list(t, &pb.ListAuditRequest{})
	if len(all) != 2 || all[0].GetCallId() != a.GetCallId() {
		t.Fatalf("all records: %v", all)
	}
	if all[0].GetTraceId() != traceID || all[1].GetTraceId() != "" {
		t.Errorf("trace ids %q, %q; want %s for the traced call only", all[0].GetTraceId(), all[1].GetTraceId(), traceID)
	}
	aSettled, bSettled := all[0].GetSettledAt(), all[1].GetSettledAt()
	for _, tc := range []struct {
		name string
		req  *pb.ListAuditRequest
		want []string
	}{
		{"principal", &pb.ListAuditRequest{Principal: "bob"}, []string{b.GetCallId()}},
		{"initiator", &pb.ListAuditRequest{Initiator: pb.Initiator_INITIATOR_CLIENT}, []string{a.GetCallId()}},
		{"method", &pb.ListAuditRequest{Method: "tools/call"}, []string{a.GetCallId(), b.GetCallId()}},
		{"other method", &pb.ListAuditRequest{Method: "prompts/get"}, nil},
		{"call id prefix", &pb.ListAuditRequest{CallIdPrefix: b.GetCallId()[:12]}, []string{b.GetCallId()}},
		{"until", &pb.ListAuditRequest{Until: bSettled}, []string{a.GetCallId()}},
		{"since", &pb.ListAuditRequest{Since: timestamppb.New(aSettled.AsTime().Add(1))}, []string{b.GetCallId()}},
		{"outcome and principal", &pb.ListAuditRequest{Outcome: "cancelled", Principal: "carol"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range e.list(t, tc.req) {
				got = append(got, r.GetCallId())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, bad := range []*pb.ListAuditRequest{
		{CallIdPrefix: "XYZ"},
		{Since: bSettled, Until: aSettled},
		{Initiator: pb.Initiator(99)},
	} {
		if _, err := e.c.ListAudit(t.Context(), bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListAudit(%v) = %v, want InvalidArgument", bad, err)
		}
	}
}

func (e *env) list(t *testing.T, req *pb.ListAuditRequest) []*pb.AuditRecord {
	t.Helper()
	resp, err := e.c.ListAudit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetRecords()
}
