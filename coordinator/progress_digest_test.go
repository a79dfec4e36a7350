package coordinator

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// FuzzProgressRecordOf: whatever a worker's digest holds, the stored
// record has at most maxDigestCalls entries, each with a call id, a time
// and finite numbers, and a message of at most maxDigestMessageLen bytes
// of printable UTF-8; it always encodes; and a well-formed entry is kept.
func FuzzProgressRecordOf(f *testing.F) {
	f.Add(strings.Repeat("ab", 16), 3.0, 10.0, "fetching", uint16(1))
	f.Add(strings.Repeat("0", 32), math.NaN(), math.Inf(1), "\xff\x00"+strings.Repeat("é", 100), uint16(1500))
	f.Add("not-an-id", 1.0, 0.0, "", uint16(2))
	f.Fuzz(func(t *testing.T, id string, progress, total float64, msg string, n uint16) {
		n = min(n, 2*maxDigestCalls)
		d := &pb.ProgressDigest{}
		for range n {
			d.Calls = append(d.Calls, &pb.CallProgress{CallId: id, At: timestamppb.New(time.Unix(1, 0)), Progress: progress, Total: total, Message: msg})
		}
		r := progressRecordOf(d)
		if len(r.Calls) > maxDigestCalls {
			t.Fatalf("%d entries kept, want at most %d", len(r.Calls), maxDigestCalls)
		}
		for _, c := range r.Calls {
			if !validCallID(c.CallID) || c.At.IsZero() || !finite(c.Progress) || !finite(c.Total) {
				t.Fatalf("kept a malformed entry %+v", c)
			}
			if len(c.Message) > maxDigestMessageLen || !utf8.ValidString(c.Message) || strings.ContainsFunc(c.Message, unicode.IsControl) {
				t.Fatalf("kept message %q (%d bytes)", c.Message, len(c.Message))
			}
		}
		encode(r) // panics on what JSON cannot hold
		wellFormed := validCallID(id) && finite(progress) && finite(total)
		if want := min(int(n), maxDigestCalls); wellFormed && len(r.Calls) != want {
			t.Fatalf("%d well-formed entries kept of %d, want %d", len(r.Calls), n, want)
		}
		if !wellFormed && len(r.Calls) != 0 {
			t.Fatalf("kept %d malformed entries", len(r.Calls))
		}
	})
}
