package gateway

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// checkHeaders validates the headers a 2026-07-28 POST mirrors from its
// body (the protocol version, Mcp-Method, Mcp-Name and the Mcp-Param-*
// headers a tool's schema names): each must be there when its body field
// is, and match it. Intermediaries may route on them, so a request whose
// headers say something else than its body is refused.
func (g *Gateway) checkHeaders(r *http.Request, m *jsonrpc.Message) *jsonrpc.Error {
	v := r.Header.Get(hdrVersion)
	if v == "" {
		return mismatch("%s header is required", hdrVersion)
	}
	if mv := paramsOf(m).version(); mv != "" && mv != v {
		return mismatch("%s header %q does not match _meta %q", hdrVersion, v, mv)
	}
	switch hm := r.Header.Values(hdrMethod); {
	case len(hm) == 0:
		return mismatch("%s header is required", hdrMethod)
	case len(hm) > 1 || hm[0] != m.Method:
		return mismatch("%s header %q does not match method %q", hdrMethod, strings.Join(hm, ", "), m.Method)
	}
	if e := checkName(r, m); e != nil {
		return e
	}
	if m.Method == "tools/call" {
		return g.checkParamHeaders(r, paramsOf(m))
	}
	return nil
}

func mismatch(format string, args ...any) *jsonrpc.Error {
	return jsonrpc.Errorf(mcpspec.CodeHeaderMismatch, "Header mismatch: "+format, args...)
}

// checkName checks Mcp-Name against the param it mirrors (params.name of
// tools/call, for one: mcpspec.NameParam).
func checkName(r *http.Request, m *jsonrpc.Message) *jsonrpc.Error {
	field := mcpspec.NameParam(m.Method)
	if field == "" {
		return nil
	}
	var p map[string]json.RawMessage
	json.Unmarshal(m.Params, &p)
	var body string
	if json.Unmarshal(p[field], &body) != nil {
		return nil // no string to mirror; the handler answers the bad params
	}
	hv := r.Header.Values(hdrName)
	if len(hv) == 0 {
		return mismatch("%s header is required for %s", hdrName, m.Method)
	}
	got, ok := mcpspec.DecodeHeaderValue(hv[0])
	if len(hv) > 1 || !ok || got != body {
		return mismatch("%s header does not match params.%s %q", hdrName, field, body)
	}
	return nil
}

// headerParam is a tool argument its schema mirrors into a header.
type headerParam struct {
	path   []string // the chain of properties keys from the schema root
	header string   // Mcp-Param-<header>
}

// headerParams finds the x-mcp-header annotations statically reachable
// from a schema's root through properties keys only.
func headerParams(schema json.RawMessage, path []string, out []headerParam) []headerParam {
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
			out = append(out, headerParam{path: p, header: ann.Header})
		}
		out = headerParams(sub, p, out)
	}
	return out
}

// checkParamHeaders checks the Mcp-Param-* headers of a tools/call
// against its arguments, as the called tool's schema asks.
func (g *Gateway) checkParamHeaders(r *http.Request, p *inParams) *jsonrpc.Error {
	t := g.knownTool(r.Context(), p.Name)
	if t == nil {
		return nil
	}
	for _, hp := range headerParams(t.GetInputSchemaJson(), nil, nil) {
		if e := checkParam(r, hp, valueAt(p.Arguments, hp.path)); e != nil {
			return e
		}
	}
	return nil
}

// valueAt returns the JSON value at path in args; nil if absent or null.
func valueAt(args json.RawMessage, path []string) json.RawMessage {
	v := args
	for _, key := range path {
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

// checkParam checks one Mcp-Param header: present exactly when the
// argument is, and equal to it once decoded (integers numerically).
func checkParam(r *http.Request, hp headerParam, body json.RawMessage) *jsonrpc.Error {
	name := "Mcp-Param-" + hp.header
	hv := r.Header.Values(name)
	switch {
	case body == nil && len(hv) == 0:
		return nil
	case body == nil:
		return mismatch("%s header given but the argument %s is absent", name, strings.Join(hp.path, "."))
	case len(hv) == 0:
		return mismatch("%s header is required: the argument %s is set", name, strings.Join(hp.path, "."))
	}
	got, ok := mcpspec.DecodeHeaderValue(hv[0])
	if len(hv) > 1 || !ok || !paramEqual(got, body) {
		return mismatch("%s header does not match the argument %s", name, strings.Join(hp.path, "."))
	}
	return nil
}

// paramEqual compares a decoded header value with the argument's JSON.
func paramEqual(header string, body json.RawMessage) bool {
	var v any
	if json.Unmarshal(body, &v) != nil {
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
	return false // objects and arrays are never mirrored
}
