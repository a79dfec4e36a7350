package gateway

import (
	"encoding/json"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// The gateway fronts tools only, so far: its catalogue of prompts,
// resources and resource templates is empty. It answers their requests as
// a server with nothing to offer does, rather than as one that does not
// know the methods, so that clients listing everything get empty lists
// (with 2026-07-28's caching hints) and a read names the unknown URI
// (SEP-2164). The catalogue of what workers offer (issue 19) replaces
// this.
func (s *session) emptyCatalogue(m *jsonrpc.Message) (any, *jsonrpc.Error) {
	switch m.Method {
	case "prompts/list":
		return map[string]any{"prompts": []any{}}, nil
	case "resources/list":
		return map[string]any{"resources": []any{}}, nil
	case "resources/templates/list":
		return map[string]any{"resourceTemplates": []any{}}, nil
	case "prompts/get":
		var p struct {
			Name string `json:"name"`
		}
		json.Unmarshal(m.Params, &p)
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "unknown prompt: %q", p.Name)
	}
	var p struct {
		URI string `json:"uri"`
	}
	json.Unmarshal(m.Params, &p)
	code := jsonrpc.CodeInvalidParams
	if !s.isModern() {
		code = codeResourceNotFound // what 2025-11-25 and earlier define
	}
	data, _ := json.Marshal(map[string]string{"uri": p.URI})
	return nil, &jsonrpc.Error{Code: code, Message: "Resource not found", Data: data}
}

// codeResourceNotFound is the resource-not-found code of 2025-11-25 and
// earlier; 2026-07-28 retired it for -32602.
const codeResourceNotFound = -32002
