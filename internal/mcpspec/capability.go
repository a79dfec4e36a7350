package mcpspec

import (
	"encoding/json"
	"strings"
)

// Capability names the client capability a request toward the client
// needs: "sampling", "elicitation.form", "elicitation.url" or "roots", or
// "" when it needs none (ping). An unknown method needs the impossible
// capability of its own name.
func Capability(method string, params json.RawMessage) string {
	switch method {
	case "ping":
		return ""
	case "sampling/createMessage":
		return "sampling"
	case "roots/list":
		return "roots"
	case "elicitation/create":
		var p struct {
			Mode string `json:"mode"`
		}
		json.Unmarshal(params, &p)
		if p.Mode == "url" {
			return "elicitation.url"
		}
		return "elicitation.form"
	}
	return method
}

// Declared reports whether caps, the capabilities object a client
// declared, holds what a request of method with params needs, and names
// that capability. A bare "elicitation": {} declares form mode, as
// clients from before the modes did.
func Declared(caps json.RawMessage, method string, params json.RawMessage) (need string, ok bool) {
	need = Capability(method, params)
	if need == "" {
		return "", true
	}
	var top map[string]json.RawMessage
	json.Unmarshal(caps, &top)
	name, sub, _ := strings.Cut(need, ".")
	raw, ok := top[name]
	if !ok || sub == "" {
		return need, ok
	}
	var subs map[string]json.RawMessage
	json.Unmarshal(raw, &subs)
	_, ok = subs[sub]
	return need, ok || need == "elicitation.form" && len(subs) == 0
}
