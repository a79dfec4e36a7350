package gateway

import (
	"encoding/json"
	"net/http"
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
	v := r.Header.Get(mcpspec.HeaderProtocolVersion)
	if v == "" {
		return mismatch("%s header is required", mcpspec.HeaderProtocolVersion)
	}
	if mv := paramsOf(m).version(); mv != "" && mv != v {
		return mismatch("%s header %q does not match _meta %q", mcpspec.HeaderProtocolVersion, v, mv)
	}
	switch hm := r.Header.Values(mcpspec.HeaderMethod); {
	case len(hm) == 0:
		return mismatch("%s header is required", mcpspec.HeaderMethod)
	case len(hm) > 1 || hm[0] != m.Method:
		return mismatch("%s header %q does not match method %q", mcpspec.HeaderMethod, strings.Join(hm, ", "), m.Method)
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
	hv := r.Header.Values(mcpspec.HeaderName)
	if len(hv) == 0 {
		return mismatch("%s header is required for %s", mcpspec.HeaderName, m.Method)
	}
	got, ok := mcpspec.DecodeHeaderValue(hv[0])
	if len(hv) > 1 || !ok || got != body {
		return mismatch("%s header does not match params.%s %q", mcpspec.HeaderName, field, body)
	}
	return nil
}

// checkParamHeaders checks the Mcp-Param-* headers of a tools/call
// against its arguments, as the called tool's schema asks.
func (g *Gateway) checkParamHeaders(r *http.Request, p *inParams) *jsonrpc.Error {
	t := g.knownTool(r.Context(), p.Name)
	if t == nil {
		return nil
	}
	for _, hp := range mcpspec.ParamHeaders(t.GetInputSchemaJson()) {
		if e := checkParam(r, hp, hp.Argument(p.Arguments)); e != nil {
			return e
		}
	}
	return nil
}

// checkParam checks one Mcp-Param header: present exactly when the
// argument is, and equal to it once decoded (integers numerically).
func checkParam(r *http.Request, hp mcpspec.ParamHeader, body json.RawMessage) *jsonrpc.Error {
	name := mcpspec.HeaderParamPrefix + hp.Name
	hv := r.Header.Values(name)
	switch {
	case body == nil && len(hv) == 0:
		return nil
	case body == nil:
		return mismatch("%s header given but the argument %s is absent", name, strings.Join(hp.Path, "."))
	case len(hv) == 0:
		return mismatch("%s header is required: the argument %s is set", name, strings.Join(hp.Path, "."))
	}
	got, ok := mcpspec.DecodeHeaderValue(hv[0])
	if len(hv) > 1 || !ok || !mcpspec.ParamMatches(got, body) {
		return mismatch("%s header does not match the argument %s", name, strings.Join(hp.Path, "."))
	}
	return nil
}
