package coordinator

import (
	"encoding/json"
	"testing"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Request ids render as JSON exactly as sent, whatever they contain.
func FuzzRequestIDJSON(f *testing.F) {
	for _, s := range []string{"1", "a\x01b", "\xff", "\u2028", `"quoted"`, "tab\there"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id := &pb.RequestId{Kind: &pb.RequestId_Text{Text: s}}
		raw := client.RequestIDJSON(id)
		var back string
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatalf("%q renders as invalid JSON %s: %v", s, raw, err)
		}
		if err := validateRequestID(id); err == nil && back != s {
			t.Fatalf("%q round-trips as %q", s, back)
		}
		k := requestKey(id)
		if k == requestKey(&pb.RequestId{Kind: &pb.RequestId_Number{Number: 1}}) && s != "" {
			t.Fatalf("string %q collides with number 1", s)
		}
	})
}

// Regression: two stop reports for one call in a batch made etcd reject
// the whole transaction ("duplicate key given in txn request").
func TestDedupeStops(t *testing.T) {
	got := dedupeStops([]stopReport{{callID: "a"}, {callID: "b"}, {callID: "a"}})
	if len(got) != 2 || got[0].callID != "a" || got[1].callID != "b" {
		t.Fatalf("dedupeStops = %v", got)
	}
}
