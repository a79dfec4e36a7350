package mcpspec

import (
	"encoding/base64"
	"strings"
)

// HTTP headers of Streamable HTTP. Mcp-Session-Id is of the 2025 era
// only; a 2026-07-28 POST mirrors its method, and the param NameParam
// names, in Mcp-Method and Mcp-Name.
const (
	HeaderSessionID       = "Mcp-Session-Id"
	HeaderProtocolVersion = "Mcp-Protocol-Version"
	HeaderMethod          = "Mcp-Method"
	HeaderName            = "Mcp-Name"
)

// NameParam is the param whose string value a 2026-07-28 request of
// method mirrors in its Mcp-Name header, or "" if it mirrors none.
func NameParam(method string) string {
	switch method {
	case "tools/call", "prompts/get":
		return "name"
	case "resources/read":
		return "uri"
	case "tasks/get", "tasks/update", "tasks/cancel":
		return "taskId"
	}
	return ""
}

// DecodeHeaderValue undoes the =?base64?...?= sentinel encoding of an
// Mcp-Name or Mcp-Param-* value. A value with characters a header may
// not carry, or a sentinel whose Base64 is not valid (padding included),
// is not ok.
func DecodeHeaderValue(v string) (string, bool) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 || c > 0x7e) && c != '\t' {
			return "", false
		}
	}
	inner, ok := strings.CutPrefix(v, "=?base64?")
	if !ok {
		return v, true
	}
	inner, ok = strings.CutSuffix(inner, "?=")
	if !ok {
		return v, true // no sentinel: a literal value
	}
	b, err := base64.StdEncoding.Strict().DecodeString(inner)
	return string(b), err == nil
}
