package mcpspec

import (
	"encoding/json"
	"testing"
)

func TestDeclared(t *testing.T) {
	for _, tc := range []struct {
		caps, method, params string
		need                 string
		ok                   bool
	}{
		{`{}`, "ping", `{}`, "", true},
		{`{}`, "sampling/createMessage", `{}`, "sampling", false},
		{`{"sampling":{}}`, "sampling/createMessage", `{}`, "sampling", true},
		{`{"roots":{"listChanged":true}}`, "roots/list", `{}`, "roots", true},
		{`{"elicitation":{}}`, "elicitation/create", `{"message":"?"}`, "elicitation.form", true},
		{`{"elicitation":{}}`, "elicitation/create", `{"mode":"url"}`, "elicitation.url", false},
		{`{"elicitation":{"url":{}}}`, "elicitation/create", `{"mode":"url"}`, "elicitation.url", true},
		{`{"elicitation":{"url":{}}}`, "elicitation/create", `{"mode":"form"}`, "elicitation.form", false},
		{`{"elicitation":{"form":{}}}`, "elicitation/create", `{}`, "elicitation.form", true},
		{`{"x/y":{}}`, "x/y", `{}`, "x/y", true},
		{`not json`, "roots/list", `{}`, "roots", false},
		{`{"made/up":{}}`, "made/up", `{}`, "made/up", true},
		{`{}`, "made/up", `{}`, "made/up", false},
	} {
		need, ok := Declared(json.RawMessage(tc.caps), tc.method, json.RawMessage(tc.params))
		if need != tc.need || ok != tc.ok {
			t.Errorf("Declared(%s, %s, %s) = %q, %v; want %q, %v", tc.caps, tc.method, tc.params, need, ok, tc.need, tc.ok)
		}
	}
}
