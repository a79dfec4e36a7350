package mcpspec

import "testing"

// Every known level passes every min at or below it, and nothing else;
// an unknown level, or no min, passes nothing.
func TestLevelPasses(t *testing.T) {
	for i, level := range LogLevels {
		for j, min := range LogLevels {
			if got := LevelPasses(level, min); got != (i >= j) {
				t.Errorf("LevelPasses(%q, %q) = %v", level, min, got)
			}
		}
		if LevelPasses(level, "") || LevelPasses(level, "verbose") || LevelPasses("trace", level) {
			t.Errorf("an unknown level or min passes against %q", level)
		}
	}
	if len(LogLevels) != 8 || LogLevels[0] != "debug" || LogLevels[7] != "emergency" {
		t.Errorf("LogLevels = %v, want RFC 5424's eight, debug to emergency", LogLevels)
	}
}
