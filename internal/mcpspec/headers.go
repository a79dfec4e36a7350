package mcpspec

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
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
	// HeaderParamPrefix begins the header a tools/call mirrors an
	// argument in, as its tool's input schema asks (ParamHeaders).
	HeaderParamPrefix = "Mcp-Param-"
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

// ParamHeader is a tool argument that its tool's input schema mirrors
// into a header, by the x-mcp-header annotation.
type ParamHeader struct {
	Path []string // the properties keys from the schema's root to the argument
	Name string   // the header is HeaderParamPrefix + Name
}

// ParamHeaders finds the x-mcp-header annotations of an input schema
// that are reachable from its root through properties keys only.
func ParamHeaders(schema json.RawMessage) []ParamHeader {
	return paramHeaders(schema, nil, nil)
}

func paramHeaders(schema json.RawMessage, path []string, out []ParamHeader) []ParamHeader {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return out
	}
	for name, sub := range s.Properties {
		p := append(append([]string(nil), path...), name)
		var ann struct {
			Header string `json:"x-mcp-header"`
		}
		if json.Unmarshal(sub, &ann) == nil && ann.Header != "" {
			out = append(out, ParamHeader{Path: p, Name: ann.Header})
		}
		out = paramHeaders(sub, p, out)
	}
	return out
}

// Argument is the JSON value at p.Path in a call's arguments; nil if it
// is absent or null, when no header may mirror it.
func (p ParamHeader) Argument(args json.RawMessage) json.RawMessage {
	v := args
	for _, key := range p.Path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) != nil {
			return nil
		}
		if v = obj[key]; v == nil {
			return nil
		}
	}
	if string(v) == "null" {
		return nil
	}
	return v
}

// ParamMatches reports whether a decoded Mcp-Param-* value mirrors the
// argument's JSON: a string as it is, a boolean as true or false, a
// number numerically. Objects and arrays are never mirrored.
func ParamMatches(header string, arg json.RawMessage) bool {
	var v any
	if json.Unmarshal(arg, &v) != nil {
		return false
	}
	switch b := v.(type) {
	case string:
		return header == b
	case bool:
		return header == strconv.FormatBool(b)
	case float64:
		n, err := strconv.ParseFloat(header, 64)
		return err == nil && !math.IsNaN(n) && n == b
	}
	return false
}
