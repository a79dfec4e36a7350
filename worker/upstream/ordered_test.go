package upstream

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tap passes every byte through unchanged and relays exactly the
// progress notifications, in order, however the stream is split into
// reads: events with CRLF line ends, multi-line data, comments, a result
// mentioning progress, and an oversized event are all in the stream.
func TestSSETapRelaysProgressOnly(t *testing.T) {
	big := strings.Repeat("x", maxTappedEvent+10)
	stream := ": comment\n\n" +
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"a\",\"progress\":1}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\r\ndata: \"params\":{\"progressToken\":\"a\",\"progress\":2}}\r\n\r\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"notifications/progress\"}]}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"" + big + "\",\"progress\":9}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"b\",\"progress\":3}}\n\n"
	for _, split := range []string{"whole", "one byte at a time"} {
		t.Run(split, func(t *testing.T) {
			var got []float64
			var r io.Reader = strings.NewReader(stream)
			if split != "whole" {
				r = iotest.OneByteReader(r)
			}
			tap := &sseTap{ReadCloser: io.NopCloser(r), progress: func(p *mcp.ProgressNotificationParams) { got = append(got, p.Progress) }}
			out, err := io.ReadAll(tap)
			if err != nil || !bytes.Equal(out, []byte(stream)) {
				t.Fatalf("the tap changed the stream (err %v)", err)
			}
			if want := []float64{1, 2, 3}; !slices.Equal(got, want) {
				t.Fatalf("relayed %v, want %v", got, want)
			}
		})
	}
}
