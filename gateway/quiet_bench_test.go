package gateway

import (
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Run: go test ./gateway -run '^$' -bench QuietWatch -benchmem
//
// BenchmarkQuietWatch is what every call's quiet-stream watch costs when
// its stream is never quiet for long: started, a message heard, stopped.
func BenchmarkQuietWatch(b *testing.B) {
	running := func() pb.CallState { return pb.CallState_CALL_STATE_RUNNING }
	b.ReportAllocs()
	for b.Loop() {
		heard, _, stop := quietWatch(time.Hour, running, func() {})
		heard()
		stop()
	}
}
