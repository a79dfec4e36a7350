package randid_test

import (
	"encoding/hex"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// Ids are 2n hex characters and do not repeat.
func TestNew(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := randid.New(16)
		if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
			t.Fatalf("%q is not 16 bytes in hex", id)
		}
		if seen[id] {
			t.Fatalf("%q twice", id)
		}
		seen[id] = true
	}
}
