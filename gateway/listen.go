package gateway

import (
	"encoding/json"
)

// What a 2026-07-28 subscriptions/listen may ask for: the list_changed
// notification of each list the gateway serves. A listen stream carries
// only the kinds it asked for (and was granted).

// listKinds maps a listen's notifications field to the notification it
// grants.
var listKinds = map[string]string{
	"toolsListChanged":     "notifications/tools/list_changed",
	"promptsListChanged":   "notifications/prompts/list_changed",
	"resourcesListChanged": "notifications/resources/list_changed",
}

// listenKinds is the set of change notifications one listen carries.
type listenKinds map[string]bool

// parseListen reads a listen's params: the kinds it gets, and the
// acknowledgement's "notifications" object granting them.
func parseListen(params json.RawMessage) (listenKinds, map[string]any, error) {
	var p struct {
		Notifications map[string]json.RawMessage `json:"notifications"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, nil, err
	}
	kinds, granted := listenKinds{}, map[string]any{}
	for field, method := range listKinds {
		var on bool
		if json.Unmarshal(p.Notifications[field], &on) == nil && on {
			kinds[method], granted[field] = true, true
		}
	}
	return kinds, granted, nil
}

// changeKind is the method of a list_changed notification; "" for any
// other message.
func changeKind(msg []byte) string {
	var m struct {
		Method string `json:"method"`
		ID     json.RawMessage
	}
	if json.Unmarshal(msg, &m) != nil || m.ID != nil {
		return ""
	}
	for _, method := range listKinds {
		if m.Method == method {
			return method
		}
	}
	return ""
}

// listenFilter passes a listen stream only the change notifications it
// asked for.
type listenFilter struct {
	out   sink
	kinds listenKinds
}

func (f *listenFilter) send(msg []byte) bool {
	if k := changeKind(msg); k != "" && !f.kinds[k] {
		return true // not asked for: nothing to send
	}
	return f.out.send(msg)
}

func (f *listenFilter) sendLatest(key string, msg []byte) bool { return f.out.sendLatest(key, msg) }

func (f *listenFilter) flush() { f.out.flush() }
