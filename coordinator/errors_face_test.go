package coordinator

import (
	"testing"

	"github.com/mcpcancel/mcpcancel/api/client"
)

// Every coordinator error reaches a client as its client-face error, so
// callers match errors.Is on api/client and never import this package.
func TestErrorsDecodeToTheClientFace(t *testing.T) {
	for _, e := range errorCodes {
		if got := client.Kind(toStatus(e.err)); got != e.face {
			t.Errorf("%v decodes to %v, want %v", e.err, got, e.face)
		}
	}
}
