package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// 2026-07-28 header checks against any body and any headers: never a
// panic, and a request passes exactly when its headers mirror its body,
// as checkHeaders' doc states: a protocol version header that is there
// and equals _meta's (when the body has one), an Mcp-Method header equal
// to the method, and, for tools/call, prompts/get and resources/read with
// a string name (or uri), an Mcp-Name header that decodes to it. A
// request built to mirror its own body always passes.
func FuzzCheckHeaders(f *testing.F) {
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, "2026-07-28", "tools/call", "echo")
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "", "tools/list", "")
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a b\u00e9"}}`, "2026-07-28", "resources/read", "=?base64?ZmlsZTovLy9hIGLDqQ==?=")
	f.Add(`{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"=?base64?eA==?="}}`, "2026-07-28", "prompts/get", "=?base64?eA==?=")
	g := &Gateway{}
	g.tools.Store(&[]*pb.Tool{}) // no tools: no Mcp-Param headers to check
	f.Fuzz(func(t *testing.T, body, version, method, name string) {
		m, derr := jsonrpc.Decode([]byte(body))
		if derr != nil || m.Kind != jsonrpc.KindRequest {
			return
		}
		r := httptest.NewRequest("POST", "/mcp", nil)
		sent := map[string]string{}
		for k, v := range map[string]string{mcpspec.HeaderProtocolVersion: version, mcpspec.HeaderMethod: method, mcpspec.HeaderName: name} {
			if v != "" && !strings.ContainsAny(v, "\r\n\x00") {
				r.Header.Set(k, v)
				sent[k] = v
			}
		}
		bodyVersion, bodyName, named := mirroredFields(m)
		want := sent[mcpspec.HeaderProtocolVersion] != "" && (bodyVersion == "" || bodyVersion == sent[mcpspec.HeaderProtocolVersion]) &&
			sent[mcpspec.HeaderMethod] == m.Method
		if named {
			got, ok := mcpspec.DecodeHeaderValue(sent[mcpspec.HeaderName])
			want = want && sent[mcpspec.HeaderName] != "" && ok && got == bodyName
		}
		if err := g.checkHeaders(r, m); (err == nil) != want {
			t.Fatalf("headers %q on %s: checkHeaders = %v, want pass %v", sent, body, err, want)
		}

		// The same body with headers that mirror it passes.
		mr := httptest.NewRequest("POST", "/mcp", nil)
		mr.Header.Set(mcpspec.HeaderProtocolVersion, cmp.Or(bodyVersion, "2026-07-28"))
		mr.Header.Set(mcpspec.HeaderMethod, m.Method)
		if named {
			mr.Header.Set(mcpspec.HeaderName, "=?base64?"+base64.StdEncoding.EncodeToString([]byte(bodyName))+"?=")
		}
		if strings.ContainsAny(m.Method+bodyVersion, "\r\n\x00") || strings.IndexFunc(m.Method+bodyVersion, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) >= 0 {
			return // not a value a header can carry as it is
		}
		if err := g.checkHeaders(mr, m); err != nil {
			t.Fatalf("mirroring headers %v on %s refused: %v", mr.Header, body, err)
		}
	})
}

// mirroredFields reads, independently of checkHeaders, the body fields a
// 2026-07-28 request's headers mirror: _meta's protocol version, and the
// name (or uri) of the methods that have one, if it is a string.
func mirroredFields(m *jsonrpc.Message) (version, name string, named bool) {
	var p map[string]json.RawMessage
	json.Unmarshal(m.Params, &p)
	var meta map[string]json.RawMessage
	json.Unmarshal(p["_meta"], &meta)
	json.Unmarshal(meta["io.modelcontextprotocol/protocolVersion"], &version)
	field := map[string]string{"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}[m.Method]
	if field != "" {
		named = json.Unmarshal(p[field], &name) == nil
	}
	return version, name, named
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
			line, err := jsonrpc.ReadLine(br, int64(max))
			if int64(len(line)) > int64(max) {
				t.Fatalf("line of %d bytes over a %d-byte limit", len(line), max)
			}
			total += len(line)
			if err != nil && err != jsonrpc.ErrLineTooLong {
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
