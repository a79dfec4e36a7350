package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// Tasks of a fronted server. The gateway presents every task to its
// clients from the coordinator's state, so the adapter runs a task's call
// the way the server needs it run:
//
//   - a tool whose execution.taskSupport is "optional" (or unset) is
//     called as an ordinary tools/call, and the client's tasks/cancel
//     reaches the server as notifications/cancelled, as for any call;
//   - a tool whose taskSupport is "required" refuses ordinary calls, so
//     the adapter calls it as a task of the server's own (params.task),
//     waits for its result with tasks/result, and turns a cancellation of
//     the call into tasks/cancel.
//
// The SDK the adapter speaks MCP with knows nothing of tasks, so this is
// done on the connection under it (taskTransport): the SDK sees one
// tools/call and one response. The tool's task support is read from the
// raw tools/list, which the SDK's Tool type drops, and offered as the
// worker tool's TaskSupport (so that the gateway honours it too).

// taskTransport wraps a transport with taskConn.
type taskTransport struct {
	mcp.Transport
	support *taskSupports
}

func (t taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &taskConn{Connection: c, support: t.support, lists: map[jsonrpc.ID]bool{}, calls: map[jsonrpc.ID]*upstreamTask{}, ours: map[jsonrpc.ID]*upstreamTask{}}, nil
}

// taskSupports is what the server's tools/list said of each tool.
type taskSupports struct {
	mu       sync.Mutex
	m        map[string]string
	required bool // some tool requires task augmentation
}

// anyRequired says whether some tool requires task augmentation: if none
// does, a tools/call goes upstream as the SDK wrote it, its params
// undecoded.
func (s *taskSupports) anyRequired() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.required
}

func (s *taskSupports) get(tool string) string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[tool]
}

func (s *taskSupports) set(tools []rawTool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	for _, t := range tools {
		s.m[t.Name] = t.Execution.TaskSupport
	}
	s.required = false
	for _, support := range s.m {
		s.required = s.required || support == worker.TaskRequired
	}
}

type rawTool struct {
	Name      string `json:"name"`
	Execution struct {
		TaskSupport string `json:"taskSupport"`
	} `json:"execution"`
}

// upstreamTask is one tools/call run as a task of the server.
type upstreamTask struct {
	call      jsonrpc.ID // the SDK's id of the tools/call
	taskID    string
	cancelled bool // the SDK gave up the call
}

type taskConn struct {
	mcp.Connection
	support *taskSupports
	next    atomic.Int64
	writes  sync.WaitGroup // requests sent from Read, which must not wait on them

	mu    sync.Mutex
	lists map[jsonrpc.ID]bool          // tools/list requests in flight
	calls map[jsonrpc.ID]*upstreamTask // augmented tools/call, by the SDK's id
	ours  map[jsonrpc.ID]*upstreamTask // our tasks/result and tasks/cancel requests
}

func (c *taskConn) ourID() jsonrpc.ID {
	id, _ := jsonrpc.MakeID(fmt.Sprintf("mcpcancel-task-%d", c.next.Add(1)))
	return id
}

// Write adds params.task to a call of a tool that requires it, and turns
// the SDK's cancellation of such a call into tasks/cancel.
func (c *taskConn) Write(ctx context.Context, m jsonrpc.Message) error {
	req, ok := m.(*jsonrpc.Request)
	if !ok {
		return c.Connection.Write(ctx, m)
	}
	switch {
	case req.IsCall() && req.Method == "tools/list":
		c.mu.Lock()
		c.lists[req.ID] = true
		c.mu.Unlock()
	case req.IsCall() && req.Method == "tools/call" && c.support.anyRequired():
		var p map[string]json.RawMessage
		var name string
		if json.Unmarshal(req.Params, &p) == nil && json.Unmarshal(p["name"], &name) == nil && c.support.get(name) == worker.TaskRequired {
			p["task"] = json.RawMessage(`{}`)
			params, _ := json.Marshal(p)
			c.mu.Lock()
			c.calls[req.ID] = &upstreamTask{call: req.ID}
			c.mu.Unlock()
			return c.Connection.Write(ctx, &jsonrpc.Request{ID: req.ID, Method: req.Method, Params: params})
		}
	case !req.IsCall() && req.Method == "notifications/cancelled":
		if t := c.cancelled(req.Params); t != nil {
			return c.sendCancel(ctx, t)
		}
	}
	return c.Connection.Write(ctx, m)
}

// cancelled marks the augmented call a cancellation names; it returns the
// task to cancel if the server already created it.
func (c *taskConn) cancelled(params json.RawMessage) *upstreamTask {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return nil
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.calls[id]
	if t == nil {
		for _, o := range c.ours {
			if o.call == id {
				t = o
			}
		}
	}
	if t == nil {
		return nil
	}
	t.cancelled = true
	if t.taskID == "" {
		return nil // cancelled once CreateTaskResult comes
	}
	return t
}

func (c *taskConn) sendCancel(ctx context.Context, t *upstreamTask) error {
	id := c.ourID()
	c.mu.Lock()
	c.ours[id] = &upstreamTask{call: t.call, taskID: t.taskID, cancelled: true}
	c.mu.Unlock()
	params, _ := json.Marshal(map[string]string{"taskId": t.taskID})
	c.writes.Go(func() {
		c.Connection.Write(context.WithoutCancel(ctx), &jsonrpc.Request{ID: id, Method: "tasks/cancel", Params: params})
	})
	return nil
}

// Read learns task support from tools/list, swallows CreateTaskResult
// (asking for the task's result instead), and answers the SDK's
// tools/call with the task's result.
func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		m, err := c.Connection.Read(ctx)
		if err != nil {
			return m, err
		}
		resp, ok := m.(*jsonrpc.Response)
		if !ok {
			return m, nil
		}
		out, err := c.onResponse(ctx, resp)
		if err != nil || out != nil {
			return out, err
		}
	}
}

// onResponse returns the message the SDK should see for resp, or nil to
// read on.
func (c *taskConn) onResponse(ctx context.Context, resp *jsonrpc.Response) (jsonrpc.Message, error) {
	c.mu.Lock()
	list := c.lists[resp.ID]
	delete(c.lists, resp.ID)
	call := c.calls[resp.ID]
	delete(c.calls, resp.ID)
	ours := c.ours[resp.ID]
	delete(c.ours, resp.ID)
	c.mu.Unlock()
	switch {
	case list && resp.Error == nil:
		var r struct {
			Tools []rawTool `json:"tools"`
		}
		if json.Unmarshal(resp.Result, &r) == nil {
			c.support.set(r.Tools)
		}
		return resp, nil
	case call != nil && resp.Error == nil:
		var r struct {
			Task *struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if json.Unmarshal(resp.Result, &r) != nil || r.Task == nil || r.Task.TaskID == "" {
			return resp, nil // the server answered at once
		}
		return nil, c.awaitTask(ctx, call, r.Task.TaskID)
	case ours != nil && ours.cancelled:
		return nil, nil // tasks/cancel's answer, or a result nobody waits for
	case ours != nil:
		return &jsonrpc.Response{ID: ours.call, Result: resp.Result, Error: resp.Error}, nil
	}
	return resp, nil
}

// awaitTask asks for the result of the server's task, or cancels it if
// the SDK gave up the call meanwhile.
func (c *taskConn) awaitTask(ctx context.Context, call *upstreamTask, taskID string) error {
	c.mu.Lock()
	call.taskID = taskID
	cancelled := call.cancelled
	c.mu.Unlock()
	if cancelled {
		return c.sendCancel(ctx, call)
	}
	id := c.ourID()
	c.mu.Lock()
	c.ours[id] = call
	c.mu.Unlock()
	params, _ := json.Marshal(map[string]string{"taskId": taskID})
	// Over HTTP a write may last until the server answers, which for
	// tasks/result is when the task ends: Read must go on meanwhile.
	c.writes.Go(func() {
		c.Connection.Write(context.WithoutCancel(ctx), &jsonrpc.Request{ID: id, Method: "tasks/result", Params: params})
	})
	return nil
}

// Close closes the connection and waits for the requests Read sent.
func (c *taskConn) Close() error {
	err := c.Connection.Close()
	c.writes.Wait()
	return err
}
