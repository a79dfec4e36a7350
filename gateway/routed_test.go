package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// The one decode of a request's params reads the protocol version as
// metaProtocolVersion does, whatever else is wrong with them, and keeps
// the error that parseRouted answers.
func TestDecodeParamsOnce(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		version      string
		bad          bool // parseRouted refuses a tools/call with these
	}{
		{"2026-07-28", `{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, "2026-07-28", false},
		{"2025", `{"name":"echo","arguments":{"text":"hi"}}`, "", false},
		{"meta without version", `{"name":"echo","_meta":{"progressToken":1}}`, "", false},
		{"meta null", `{"name":"echo","_meta":null}`, "", false},
		{"version not a string", `{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":2026}}`, "", false},
		{"version null", `{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":null}}`, "", false},
		{"meta not an object", `{"name":"echo","_meta":"2026-07-28"}`, "", true},
		{"bad name, good version", `{"name":7,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`, "2026-07-28", true},
		{"params an array", `[1,2]`, "", true},
		{"no params", ``, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := json.RawMessage(tc.params)
			if tc.params == "" {
				raw = nil
			}
			p := decodeParams(raw)
			if got, want := p.version(), metaOnlyVersion(raw); got != want || got != tc.version {
				t.Errorf("version %q, with only _meta decoded %q, want %q", got, want, tc.version)
			}
			m := &jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.Int(1), Method: "tools/call", Params: raw}
			if _, e := parseRouted(m, p); (e != nil) != tc.bad {
				t.Errorf("parseRouted error %v, want error %v", e, tc.bad)
			}
		})
	}
}

// metaOnlyVersion reads a request's version with nothing but _meta
// decoded: the reading the one decoding of its params must agree with.
func metaOnlyVersion(params json.RawMessage) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	var v string
	json.Unmarshal(p.Meta[mcpspec.MetaProtocolVersion], &v)
	return v
}

// A request's params are decoded where it enters the gateway, once:
// every layer reads that one decoding, and a message that did not come
// through a transport is decoded when read.
func TestParamsDecodedOnce(t *testing.T) {
	m, derr := jsonrpc.Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","task":{"ttl":5},"_meta":{"io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"traceparent":"00-x"}}}`))
	if derr != nil {
		t.Fatal(derr)
	}
	parse(m)
	p := paramsOf(m)
	if p != paramsOf(m) || p.Name != "echo" || string(p.Task) != `{"ttl":5}` || !envelopeOf(p).hasCaps || metaString(p.Meta.Traceparent) != "00-x" {
		t.Fatalf("paramsOf = %+v (meta %+v), want the one decoding with name, task, caps and trace", p, p.Meta)
	}
	n := &jsonrpc.Message{Kind: jsonrpc.KindRequest, Method: "tools/call", Params: json.RawMessage(`{"name":"echo"}`)}
	if q := paramsOf(n); q.Name != "echo" || n.Parsed != nil {
		t.Fatalf("paramsOf of a message no transport parsed = %+v, kept %v", q, n.Parsed)
	}
}

// A routed request other than tools/call reaches its worker without the
// gateway's _meta, and untouched when it has none.
func TestParseRoutedDropsMeta(t *testing.T) {
	for params, want := range map[string]string{
		`{"uri":"file:///a","_meta":{"progressToken":"p"}}`: `{"uri":"file:///a"}`,
		`{"uri":"file:///a","_meta":null}`:                  `{"uri":"file:///a"}`,
		`{"uri": "file:///a"}`:                              `{"uri": "file:///a"}`,
	} {
		m := &jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.Int(1), Method: "resources/read", Params: json.RawMessage(params)}
		r, e := parseRouted(m, decodeParams(m.Params))
		if e != nil {
			t.Fatalf("%s: %v", params, e)
		}
		if string(r.params) != want {
			t.Errorf("%s: worker gets %s, want %s", params, r.params, want)
		}
	}
}

// A worker's result reaches the client as the same JSON whether it is
// relayed as raw bytes (rawResult) or decoded and re-encoded, as it was
// before: in each era, for a result with or without resultType, and for
// a cacheable method; a result that is not JSON is an internal error.
func TestRawResultAsDecoded(t *testing.T) {
	g := &Gateway{log: slog.New(slog.DiscardHandler)}
	s := newSession(g, "conn:t", "alice")
	for _, method := range []string{"tools/call", "resources/read"} {
		for _, raw := range []string{
			`{"content":[{"type":"text","text":"<b>&</b>\u2028 x"}]}`,
			" {\n \"content\" : [ ] , \"isError\":true }\n",
			`{}`,
			`{"content":[],"resultType":"complete"}`,
			`{"contents":[],"ttlMs":5}`,
			`{"text":"resultType"}`,
			`[1,2]`,
			``,
		} {
			for _, rev2026 := range []bool{false, true} {
				c := &call{s: s, id: jsonrpc.String("r-1"), method: method, rev2026: rev2026}
				got := c.result(json.RawMessage(raw))
				old := json.RawMessage(raw)
				if raw == "" {
					old = nil
				}
				var want []byte
				if rev2026 {
					want = jsonrpc.Response(c.id, completeRaw(method, old))
				} else {
					want = jsonrpc.Response(c.id, old)
				}
				var g, w any
				if err := json.Unmarshal(got, &g); err != nil {
					t.Fatalf("%s %q rev2026 %v: %s is not JSON", method, raw, rev2026, got)
				}
				json.Unmarshal(want, &w)
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s %q rev2026 %v:\n got %s\nwant %s", method, raw, rev2026, got, want)
				}
				if bytes.ContainsAny(got, "\n") {
					t.Errorf("%s %q: a newline in %s breaks stdio framing", method, raw, got)
				}
			}
		}
	}
	c := &call{s: s, id: jsonrpc.Int(2), method: "tools/call"}
	var resp struct {
		Error *jsonrpc.Error `json:"error"`
	}
	if err := json.Unmarshal(c.result(json.RawMessage(`{"content":[`)), &resp); err != nil || resp.Error == nil || resp.Error.Code != jsonrpc.CodeInternalError {
		t.Errorf("a result that is not JSON: %+v %v, want an internal error", resp.Error, err)
	}
}
