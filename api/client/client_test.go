package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcpcancel/mcpcancel/api/client"
)

func statusErr(reason, domain string) error {
	st, _ := status.New(codes.NotFound, "coordinator: no such call").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: domain})
	return st.Err()
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want *client.Error
	}{
		{"named", statusErr("UNKNOWN_CALL", client.ErrorDomain), client.ErrUnknownCall},
		{"another domain", statusErr("UNKNOWN_CALL", "elsewhere"), nil},
		{"unknown reason", statusErr("SOMETHING_NEW", client.ErrorDomain), nil},
		{"no details", status.Error(codes.Unavailable, "down"), nil},
		{"not a status", errors.New("plain"), nil},
		{"nil", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := client.Kind(tc.err); got != tc.want {
				t.Fatalf("Kind = %v, want %v", got, tc.want)
			}
			if tc.want != nil && (!errors.Is(client.Decode(tc.err), tc.want) || !client.Is(tc.err, tc.want)) {
				t.Fatal("errors.Is does not match the decoded error")
			}
			if client.Is(tc.err, client.ErrNoCapacity) {
				t.Fatal("matched the wrong error")
			}
			if tc.err != nil && client.Decode(tc.err).Error() != tc.err.Error() {
				t.Fatalf("Decode changed the message: %q", client.Decode(tc.err))
			}
		})
	}
}

// Request ids round-trip through JSON as the client sent them; 1 and "1"
// stay apart; anything but a string or an integer is refused.
func TestRequestIDCodec(t *testing.T) {
	for _, raw := range []string{`1`, `"1"`, `-7`, `"a\u0001b"`, `""`, `9007199254740993`} {
		id, err := client.ParseRequestID(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := string(client.RequestIDJSON(id)); got != raw {
			t.Fatalf("%s came back as %s", raw, got)
		}
	}
	for _, bad := range []string{`1.5`, `null`, `{}`, `[1]`, `"unterminated`, ``} {
		if _, err := client.ParseRequestID(json.RawMessage(bad)); !errors.Is(err, client.ErrBadRequestID) {
			t.Fatalf("%q: err = %v", bad, err)
		}
	}
}

func Example() {
	// What a coordinator returns when a cancel names no call.
	st, _ := status.New(codes.NotFound, "no such call").WithDetails(&errdetails.ErrorInfo{Reason: "UNKNOWN_CALL", Domain: client.ErrorDomain})
	err := st.Err()
	fmt.Println(client.Is(err, client.ErrUnknownCall), errors.Is(client.Decode(err), client.ErrNoCapacity))
	// Output: true false
}

// A session request id names its worker and token, and only ids of that
// shape parse: a call's outbound id, or one with a part missing, does not.
func TestSessionRequestID(t *testing.T) {
	id := client.SessionRequestID("w1-g0.pod", "00ff")
	if w, tok, ok := client.ParseSessionRequestID(id); !ok || w != "w1-g0.pod" || tok != "00ff" {
		t.Fatalf("ParseSessionRequestID(%q) = %q, %q, %v", id, w, tok, ok)
	}
	for _, bad := range []string{"", "mcpcancel-0123456789abcdef0123456789abcdef-1", "mcpcancel-session.", "mcpcancel-session.00ff", "mcpcancel-session..w1", "mcpcancel-session.00ff."} {
		if _, _, ok := client.ParseSessionRequestID(bad); ok {
			t.Errorf("ParseSessionRequestID(%q) parsed", bad)
		}
	}
}
