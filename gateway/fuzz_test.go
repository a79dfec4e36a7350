package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// Header values from clients: decoding never panics, and a value that
// does not use the sentinel comes back as it was, unless it holds a
// character no header may carry, which is refused.
func FuzzDecodeHeaderValue(f *testing.F) {
	for _, s := range []string{"echo", "=?base64?ZWNobw==?=", "=?base64?", "=?base64?!!?=", "", "a\x00b", "=?base64?SGVsbG8?="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := decodeHeaderValue(v)
		unsafe := strings.IndexFunc(v, func(r rune) bool { return (r < 0x20 || r > 0x7e) && r != '\t' }) >= 0
		sentinel := len(v) >= len("=?base64??=") && strings.HasPrefix(v, "=?base64?") && strings.HasSuffix(v, "?=")
		switch {
		case unsafe && ok:
			t.Fatalf("%q has a character no header carries, yet decoded as %q", v, got)
		case !unsafe && !sentinel && (!ok || got != v):
			t.Fatalf("%q decoded as %q, %v", v, got, ok)
		}
	})
}

// 2026-07-28 header checks against any body: never a panic, and a request
// whose headers mirror its body passes.
func FuzzCheckHeaders(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, "2026-07-28", "tools/call", "echo")
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "", "tools/list", "")
	g := &Gateway{}
	g.tools.Store(&[]*pb.Tool{}) // no tools: no Mcp-Param headers to check
	f.Fuzz(func(t *testing.T, body, version, method, name string) {
		m, derr := jsonrpc.Decode([]byte(body))
		if derr != nil || m.Kind != jsonrpc.KindRequest {
			return
		}
		r := httptest.NewRequest("POST", "/mcp", nil)
		for k, v := range map[string]string{hdrVersion: version, hdrMethod: method, hdrName: name} {
			if v != "" && !strings.ContainsAny(v, "\r\n\x00") {
				r.Header.Set(k, v)
			}
		}
		g.checkHeaders(r, m)
	})
}

// The stdio line reader: any input splits into lines no longer than the
// limit, and nothing is lost or invented below it.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n"), 16)
	f.Add([]byte("no newline at the end"), 8)
	f.Add([]byte("\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 1 || max > 1<<16 {
			return
		}
		br := bufio.NewReaderSize(bytes.NewReader(in), 16)
		var total int
		for {
			line, err := readLine(br, int64(max))
			if int64(len(line)) > int64(max) {
				t.Fatalf("line of %d bytes over a %d-byte limit", len(line), max)
			}
			total += len(line)
			if err != nil && err != errLineTooLong {
				break
			}
		}
		if total > len(in) {
			t.Fatalf("read %d bytes from %d", total, len(in))
		}
	})
}

// notifications/cancelled params from clients: parsing never panics and
// only well-formed ids are accepted.
func FuzzCancelParams(f *testing.F) {
	for _, s := range []string{`{"requestId":1,"reason":"x"}`, `{"requestId":"a"}`, `{}`, `[1]`, `{"requestId":1.5}`, `{"requestId":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var p cancelParams
		if json.Unmarshal([]byte(raw), &p) != nil || p.RequestID == nil {
			return
		}
		id, err := jsonrpc.ParseID(p.RequestID)
		if err != nil {
			return
		}
		back, err := jsonrpc.ParseID(mustJSON(id))
		if err != nil || back.Key() != id.Key() {
			t.Fatalf("id %s does not round-trip", p.RequestID)
		}
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
