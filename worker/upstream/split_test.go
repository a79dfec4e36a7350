package upstream

import (
	"slices"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"node server.js stdio", []string{"node", "server.js", "stdio"}},
		{"  a \t b  ", []string{"a", "b"}},
		{`a 'b c' "d e"`, []string{"a", "b c", "d e"}},
		{`a 'it''s'`, []string{"a", "its"}},
		{`a "x\"y" 'x\y'`, []string{"a", `x"y`, `x\y`}},
		{`a "\n"`, []string{"a", `\n`}},
		{`a\ b c`, []string{"a b", "c"}},
		{`a '' b`, []string{"a", "", "b"}},
		{`--flag="$HOME"`, []string{"--flag=$HOME"}},
	} {
		got, err := SplitCommand(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "   ", `a 'b`, `a "b`, `a\`} {
		if got, err := SplitCommand(bad); err == nil {
			t.Errorf("SplitCommand(%q) = %q, want an error", bad, got)
		}
	}
}
