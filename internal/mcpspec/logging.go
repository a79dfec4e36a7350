package mcpspec

import "slices"

// LogLevels are the levels of logging/setLevel and notifications/message
// (RFC 5424's severities), least severe first.
var LogLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// LevelPasses reports whether a message at level is at or above min; an
// unknown level or min passes nothing.
func LevelPasses(level, min string) bool {
	i, j := slices.Index(LogLevels, level), slices.Index(LogLevels, min)
	return i >= 0 && j >= 0 && i >= j
}
