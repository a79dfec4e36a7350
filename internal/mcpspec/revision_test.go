package mcpspec

import (
	"slices"
	"testing"
)

// initialize answers with the version asked for if it is of the 2025 era,
// else with that era's latest; a stateless version is never negotiated.
func TestNegotiate(t *testing.T) {
	for requested, want := range map[string]string{
		"2025-11-25": "2025-11-25",
		"2025-06-18": "2025-06-18",
		"2025-03-26": "2025-03-26",
		"2024-11-05": "2025-11-25",
		"2026-07-28": "2025-11-25",
		"":           "2025-11-25",
	} {
		if got := Negotiate(requested); got != want {
			t.Errorf("Negotiate(%q) = %q, want %q", requested, got, want)
		}
	}
}

func TestStateless(t *testing.T) {
	for v, want := range map[string]bool{
		"2026-07-28": true,
		"2025-11-25": false,
		"2025-03-26": false,
		"2027-01-01": false, // not served
		"":           false,
	} {
		if got := Stateless(v); got != want {
			t.Errorf("Stateless(%q) = %v, want %v", v, got, want)
		}
	}
}

// Versions are newest first, each once, the stateless one ahead of the
// 2025 era.
func TestVersionsNewestFirst(t *testing.T) {
	want := []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"}
	if !slices.Equal(Versions, want) {
		t.Fatalf("Versions = %v, want %v", Versions, want)
	}
}

func TestCacheable(t *testing.T) {
	for method, want := range map[string]bool{
		"tools/list": true, "resources/read": true, "server/discover": true, "resources/templates/list": true,
		"tools/call": false, "prompts/get": false, "completion/complete": false, "": false,
	} {
		if got := Cacheable(method); got != want {
			t.Errorf("Cacheable(%q) = %v, want %v", method, got, want)
		}
	}
}
