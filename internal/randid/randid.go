// Package randid makes mcpcancel's random identifiers (call ids, session
// ids, scope suffixes, default replica names): n bytes from crypto/rand,
// in lowercase hex, so every id is ASCII, URL-safe and header-safe.
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// New returns n random bytes as 2n hex characters.
func New(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b)
}
