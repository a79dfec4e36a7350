package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// What a 2026-07-28 subscriptions/listen may ask for (its "notifications"
// filter): the list_changed notification of each list the gateway serves,
// notifications/resources/updated for named resource URIs
// (resourceSubscriptions, which replaced resources/subscribe), and, with
// the tasks extension, notifications/tasks for named tasks (taskIds). A
// listen stream carries only what it asked for and was granted, and
// nothing before its acknowledgement.

// listKinds maps a listen's notifications field to the notification it
// grants.
var listKinds = map[string]string{
	"toolsListChanged":     "notifications/tools/list_changed",
	"promptsListChanged":   "notifications/prompts/list_changed",
	"resourcesListChanged": "notifications/resources/list_changed",
}

// Notifications a listen carries besides list_changed.
const (
	notifyResourceUpdated = "notifications/resources/updated"
	notifyTasks           = "notifications/tasks"
)

// Bounds on one listen's filter: each URI costs a call to a worker and
// two etcd keys, each task a watch.
const (
	maxListenURIs  = 64
	maxListenTasks = 64
	maxURIBytes    = 4096 // the coordinator's bound on a subscribed URI
)

// listenKinds is the set of change notifications one listen carries.
type listenKinds map[string]bool

// listenRequest is what a listen asked for, before anything is granted.
type listenRequest struct {
	kinds   listenKinds
	granted map[string]any // the list_changed fields granted, for the acknowledgement
	uris    []string       // resourceSubscriptions, deduplicated, in the order asked
	tasks   []string       // taskIds, deduplicated, in the order asked
}

// parseListen reads a listen's params.
func parseListen(params json.RawMessage) (*listenRequest, error) {
	var p struct {
		Notifications map[string]json.RawMessage `json:"notifications"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	lr := &listenRequest{kinds: listenKinds{}, granted: map[string]any{}}
	for field, method := range listKinds {
		var on bool
		if json.Unmarshal(p.Notifications[field], &on) == nil && on {
			lr.kinds[method], lr.granted[field] = true, true
		}
	}
	var err error
	if lr.uris, err = stringList(p.Notifications["resourceSubscriptions"], "resourceSubscriptions", maxListenURIs, maxURIBytes); err != nil {
		return nil, err
	}
	if lr.tasks, err = stringList(p.Notifications["taskIds"], "taskIds", maxListenTasks, 256); err != nil {
		return nil, err
	}
	return lr, nil
}

// stringList reads an optional array of non-empty strings, each at most
// maxLen bytes and at most maxN of them once duplicates are dropped.
func stringList(raw json.RawMessage, field string, maxN, maxLen int) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s must be an array of strings", field)
	}
	var out []string
	for _, v := range list {
		if v == "" || len(v) > maxLen {
			return nil, fmt.Errorf("each of %s must be 1 to %d bytes", field, maxLen)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if len(out) > maxN {
		return nil, fmt.Errorf("at most %d %s in one listen", maxN, field)
	}
	return out, nil
}

// listenMessage classifies a message for listens: the notification's
// method and what it names (the resource URI of an update, the task id
// of a task status); method is "" for anything a listen does not filter
// (responses, requests, other notifications).
func listenMessage(msg []byte) (method, name string) {
	var m struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
		Params struct {
			URI    string `json:"uri"`
			TaskID string `json:"taskId"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.ID != nil {
		return "", ""
	}
	switch m.Method {
	case notifyResourceUpdated:
		return m.Method, m.Params.URI
	case notifyTasks:
		return m.Method, m.Params.TaskID
	}
	for _, method := range listKinds {
		if m.Method == method {
			return method, ""
		}
	}
	return "", ""
}

// listenWants is what one listen was granted.
type listenWants struct {
	kinds listenKinds
	uris  map[string]bool
	tasks map[string]bool
}

func newListenWants(kinds listenKinds) *listenWants {
	return &listenWants{kinds: kinds, uris: map[string]bool{}, tasks: map[string]bool{}}
}

// empty says whether the listen was granted nothing at all.
func (w *listenWants) empty() bool {
	return len(w.kinds) == 0 && len(w.uris) == 0 && len(w.tasks) == 0
}

// wants says whether a listen notification of method naming name is for
// this listen.
func (w *listenWants) wants(method, name string) bool {
	switch method {
	case notifyResourceUpdated:
		return w.uris[name]
	case notifyTasks:
		return w.tasks[name]
	}
	return w.kinds[method]
}

// acknowledgement is the params of notifications/subscriptions/acknowledged:
// the subset of the filter the gateway agreed to honour, the resource URIs
// and task ids in the order they were asked for.
func acknowledgement(lr *listenRequest, w *listenWants) map[string]any {
	granted := map[string]any{}
	for k, v := range lr.granted {
		granted[k] = v
	}
	if uris := keep(lr.uris, w.uris); len(uris) > 0 {
		granted["resourceSubscriptions"] = uris
	}
	if tasks := keep(lr.tasks, w.tasks); len(tasks) > 0 {
		granted["taskIds"] = tasks
	}
	return map[string]any{"notifications": granted}
}

func keep(list []string, set map[string]bool) []string {
	var out []string
	for _, v := range list {
		if set[v] {
			out = append(out, v)
		}
	}
	return out
}

// listenFilter passes an HTTP listen stream only what it was granted,
// and nothing before its acknowledgement.
type listenFilter struct {
	out   sink
	wants *listenWants

	mu    sync.Mutex
	acked bool
}

// ack sends the acknowledgement; from then on, granted notifications go
// out. Nothing the stream carries can come before it.
func (f *listenFilter) ack(msg []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out.send(msg) // a sink only queues: safe under the lock
	f.acked = true
}

func (f *listenFilter) send(msg []byte) bool {
	method, name := listenMessage(msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.acked || method != "" && !f.wants.wants(method, name) {
		return true // not (yet) for this stream: nothing to send
	}
	return f.out.send(msg)
}

func (f *listenFilter) sendLatest(key string, msg []byte) bool { return f.out.sendLatest(key, msg) }

func (f *listenFilter) streams() bool { return true }

func (f *listenFilter) flush() { f.out.flush() }
