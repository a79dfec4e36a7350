package jsonrpc

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		key  string
		fail bool
	}{
		{`1`, "n1", false},
		{`"1"`, "s1", false},
		{`-7`, "n-7", false},
		{`2.0`, "n2", false},
		{`1.5`, "", true},
		{`null`, "", true},
		{`{}`, "", true},
		{`true`, "", true},
		{`1e400`, "", true},
		{`"` + strings.Repeat("x", 256) + `"`, "s" + strings.Repeat("x", 256), false},
		{`"` + strings.Repeat("x", 257) + `"`, "", true},
	} {
		id, err := ParseID(json.RawMessage(tc.raw))
		if (err != nil) != tc.fail || (err == nil && id.Key() != tc.key) {
			t.Errorf("ParseID(%s) = %q, %v", tc.raw, id.Key(), err)
		}
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind Kind
		code int
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, KindRequest, 0},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, KindNotification, 0},
		{`{"jsonrpc":"2.0","id":"a","result":{}}`, KindResponse, 0},
		{`{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}`, KindResponse, 0},
		{`not json`, 0, CodeParseError},
		{`"a string"`, 0, CodeParseError},
		{``, 0, CodeParseError},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, 0, CodeInvalidRequest},
		{`{"id":1,"method":"ping"}`, 0, CodeInvalidRequest},
		{`{"jsonrpc":"2.0","id":{},"method":"ping"}`, 0, CodeInvalidRequest},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","params":3}`, 0, CodeInvalidRequest},
		{`{"jsonrpc":"2.0","id":1}`, 0, CodeInvalidRequest},
	} {
		m, err := Decode([]byte(tc.in))
		switch {
		case tc.code != 0 && (err == nil || err.Code != tc.code):
			t.Errorf("Decode(%s) = %v, %v; want code %d", tc.in, m, err, tc.code)
		case tc.code == 0 && (err != nil || m.Kind != tc.kind):
			t.Errorf("Decode(%s) = %v, %v; want kind %d", tc.in, m, err, tc.kind)
		}
	}
}

func TestEncodeKeepsIDType(t *testing.T) {
	if got := string(Response(Int(1), struct{}{})); got != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatal(got)
	}
	if got := string(Response(String("1"), struct{}{})); got != `{"jsonrpc":"2.0","id":"1","result":{}}` {
		t.Fatal(got)
	}
	if got := string(ErrorResponse(ID{}, false, Errorf(CodeParseError, "x"))); got != `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}` {
		t.Fatal(got)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a","reason":"r"}}`,
		`{"jsonrpc":"2.0","id":1e3,"result":{}}`, `[1]`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if (m == nil) == (err == nil) {
			t.Fatalf("Decode returned %v and %v", m, err)
		}
		if m != nil && m.Kind != KindNotification {
			if _, err := json.Marshal(m.ID); err != nil {
				t.Fatal(err)
			}
			back, perr := ParseID(mustMarshal(m.ID))
			if perr != nil || back.Key() != m.ID.Key() {
				t.Fatalf("id %q does not round-trip: %q %v", m.ID.Key(), back.Key(), perr)
			}
		}
	})
}
