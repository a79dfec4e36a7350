package linearize

import (
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

func coordError(t *testing.T, code codes.Code, reason string) error {
	t.Helper()
	st, err := status.New(code, reason).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: coordinator.ErrorDomain})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// What a Start got maps to the model's output: the Begun message, the
// refusals that wrote nothing, and an end that leaves it open.
func TestStartOutput(t *testing.T) {
	placed := &pb.BeginResponse{CallId: "x", Worker: "w", Placement: []byte(`{}`)}
	for _, tc := range []struct {
		name  string
		p     *pb.BeginResponse
		begun *pb.Begun
		err   error
		want  Output
	}{
		{"begun", placed, &pb.Begun{Fence: 7}, nil, Output{ID: "x"}},
		{"begun settled", placed, &pb.Begun{Settled: true}, nil, Output{ID: "x", Result: RSettled}},
		{"Begin-first", &pb.BeginResponse{CallId: "x", Fence: 7}, nil, nil, Output{ID: "x"}},
		{"abandoned", placed, nil, coordError(t, codes.Aborted, "BEGIN_ABANDONED"), Output{ID: "x", Result: RAbandoned}},
		{"duplicate", placed, nil, coordError(t, codes.AlreadyExists, "DUPLICATE_REQUEST_ID"), Output{ID: "x", Result: RDuplicate}},
		{"its worker gone before the record", placed, nil, coordError(t, codes.NotFound, "UNKNOWN_CALL"), Output{ID: "x", Result: RRefused}},
		{"no worker", nil, nil, status.Error(codes.NotFound, "no worker offers sleep"), Output{Result: RRefused}},
		{"lost after placing", placed, nil, status.Error(codes.Unavailable, "gone"), Output{ID: "x", Unknown: true}},
		{"lost before placing", nil, nil, errors.New("connection reset"), Output{Unknown: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := startOutput(tc.p, tc.begun, tc.err); got != tc.want {
				t.Fatalf("startOutput = %+v, want %+v", got, tc.want)
			}
		})
	}
}
