package upstream

import (
	"errors"
	"strings"
)

// SplitCommand splits a command line into words as a POSIX shell would,
// without expanding anything: words are separated by blanks, single
// quotes keep everything literally, double quotes keep everything but
// backslash escapes of ", \, $ and `, and a backslash outside quotes
// escapes the next character.
func SplitCommand(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote rune
		esc   bool
	)
	for _, r := range s {
		switch {
		case esc:
			if quote == '"' && !strings.ContainsRune("\"\\$`", r) {
				cur.WriteRune('\\')
			}
			cur.WriteRune(r)
			esc = false
		case r == '\\' && quote != '\'':
			esc, in = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	switch {
	case esc:
		return nil, errors.New("command ends in a backslash")
	case quote != 0:
		return nil, errors.New("command has an unterminated quote")
	}
	if in {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("empty command")
	}
	return words, nil
}
