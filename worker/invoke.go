package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// answer is what a handler answered: a result, or a JSON-RPC error that
// the client gets instead (methods other than tools/call).
type answer struct {
	body      json.RawMessage
	rpcErr    json.RawMessage
	toolError bool // audited tool_error: a tool's isError, or rpcErr
}

// invoke runs one call's handler, whatever its method.
type invoke func(ctx context.Context, c *Call) (*answer, error)

// methodOf is an Execute's method; gateways that predate methods send
// only tool calls.
func methodOf(req *pb.ExecuteRequest) string {
	if m := req.GetMethod(); m != "" {
		return m
	}
	return MethodToolsCall
}

// callArguments reads the arguments a handler sees: a tool's from
// arguments_json, a prompt's from params.arguments; {} otherwise.
func callArguments(req *pb.ExecuteRequest) (json.RawMessage, error) {
	args := json.RawMessage(req.GetArgumentsJson())
	if methodOf(req) != MethodToolsCall {
		var p struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		if len(req.GetParamsJson()) > 0 && json.Unmarshal(req.GetParamsJson(), &p) != nil {
			return nil, status.Error(codes.InvalidArgument, "params must be a JSON object")
		}
		args = p.Arguments
		if string(args) == "null" {
			args = nil
		}
	}
	if len(args) == 0 || string(args) == "null" { // the gateway lets a client send "arguments": null
		args = json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return nil, status.Error(codes.InvalidArgument, "arguments must be a JSON object")
	}
	return args, nil
}

// invokerLocked finds what runs method on target; nil if nothing here
// does. The caller holds w.mu.
func (w *Worker) invokerLocked(method, target string) invoke {
	if method == MethodToolsCall {
		if reg := w.tools[target]; reg != nil {
			return toolInvoker(reg.handler)
		}
		return nil
	}
	if h := w.offered.handler(method, target); h != nil {
		return requestInvoker(h)
	}
	return nil
}

func toolInvoker(h Handler) invoke {
	return func(ctx context.Context, c *Call) (*answer, error) {
		res, err := h(ctx, c)
		if ctx.Err() == nil {
			// A tool's errors are its failures, but for -32042: the
			// client must see that one as the JSON-RPC error it is.
			if rpcErr, ok, derr := c.urlElicitationError(err); ok {
				if derr != nil {
					return nil, derr
				}
				return rpcAnswer(rpcErr, err)
			}
		}
		if err != nil || res == nil {
			return nil, err
		}
		body, err := json.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("result does not encode: %w", err)
		}
		return &answer{body: body, toolError: res.IsError}, nil
	}
}

func requestInvoker(h RequestHandler) invoke {
	return func(ctx context.Context, c *Call) (*answer, error) {
		res, err := h(ctx, c)
		if _, ok, derr := c.urlElicitationError(err); ok && derr != nil && ctx.Err() == nil {
			return nil, derr
		}
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && ctx.Err() == nil {
			return rpcAnswer(rpcErr, err)
		}
		if err != nil || res == nil {
			return nil, err
		}
		body, err := json.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("result does not encode: %w", err)
		}
		return &answer{body: body}, nil
	}
}

// describe names the call in errors: "tool x", "resources/read y".
func (c *Call) describe() string {
	if c.Method == MethodToolsCall || c.Method == "" {
		return "tool " + c.Tool
	}
	return c.Method + " " + c.Tool
}

// metricTarget labels a call's metrics: the tool's name, or the method
// (resource URIs are unbounded).
func metricTarget(c *Call) string {
	if c.Method == MethodToolsCall || c.Method == "" {
		return c.Tool
	}
	return c.Method
}

// spanResult is what the handler's span records of the answer: whether it
// was the handler's own error.
func (a *answer) spanResult() *Result {
	if a == nil {
		return nil
	}
	return &Result{IsError: a.toolError}
}

// rpcAnswer is a handler's JSON-RPC error as the client gets it; err
// itself if it does not encode.
func rpcAnswer(rpcErr *jsonrpc.Error, err error) (*answer, error) {
	b, merr := json.Marshal(rpcErr)
	if merr != nil {
		return nil, err
	}
	return &answer{rpcErr: b, toolError: true}, nil
}
