package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// A task waiting for its client's input (the 2026-07-28 tasks extension):
// the task's call asks its client something, which a task's client
// cannot be asked directly (it polls). The worker records the request in
// the call record (SetTaskInput), so the task reads input_required with
// the request in inputRequests from any replica; the client answers with
// tasks/update, which UpdateTask takes out of the record in one
// transaction, and the gateway hands the answer to the worker.
//
// Both writes are guarded by the call record's revision, as every
// decision is: an update that races the task's end (tasks/cancel, its
// completion) either commits while the task runs, and its answers go to
// the worker, or finds the task terminal and takes nothing. A key is
// never reused over the task's life: one asked before is refused.

// Bounds of what a task's call may wait on at once.
const (
	maxTaskInputs      = 32
	maxTaskInputBytes  = 256 << 10 // the params of the outstanding requests together
	maxTaskUsedKeys    = 1024      // keys answered or withdrawn, remembered to refuse their reuse
	maxTaskInputKeyLen = 256
)

// taskInput is a request a task's call waits on, in its call record.
type taskInput struct {
	Seq    int64           `json:"seq"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// SetTaskInput implements CoordinatorService.SetTaskInput.
func (s *Server) SetTaskInput(ctx context.Context, req *pb.SetTaskInputRequest) (*pb.SetTaskInputResponse, error) {
	if err := validateTaskInput(req); err != nil {
		return nil, toStatus(err)
	}
	rec, kv, err := s.ownedCall(ctx, req.GetCall())
	if err != nil {
		return nil, toStatus(err)
	}
	if rec.Task == nil {
		return nil, toStatus(invalid("call %s is not a task", rec.CallID))
	}
	for range 5 {
		if rec.State != stateRunning {
			return nil, toStatus(fmt.Errorf("%w: the task is %s", ErrUnknownCall, rec.State))
		}
		next, err := withTaskInput(rec, req)
		if err != nil {
			return nil, toStatus(err)
		}
		cur, err := s.putTaskRecord(ctx, kv, next)
		if err != nil || cur == nil {
			return &pb.SetTaskInputResponse{}, toStatus(err)
		}
		if rec, err = decode[callRecord]("call", cur.Value); err != nil {
			return nil, toStatus(err)
		}
		kv = cur
	}
	return nil, toStatus(fmt.Errorf("%w: task %s kept changing", ErrEtcd, rec.CallID))
}

func validateTaskInput(req *pb.SetTaskInputRequest) error {
	if len(req.GetAsk()) > maxTaskInputs {
		return invalid("a task may wait on at most %d requests", maxTaskInputs)
	}
	for _, in := range req.GetAsk() {
		if in.GetKey() == "" || len(in.GetKey()) > maxTaskInputKeyLen {
			return invalid("an input request needs a key of 1 to %d bytes", maxTaskInputKeyLen)
		}
		if in.GetMethod() == "" {
			return invalid("input request %q names no method", in.GetKey())
		}
		if p := in.GetParamsJson(); len(p) > 0 && !json.Valid(p) {
			return invalid("input request %q has params that are not JSON", in.GetKey())
		}
	}
	return nil
}

// withTaskInput is rec with req's requests asked and withdrawn.
func withTaskInput(rec *callRecord, req *pb.SetTaskInputRequest) (*callRecord, error) {
	t := rec.Task.clone()
	for _, k := range req.GetWithdraw() {
		if _, ok := t.Inputs[k]; ok {
			delete(t.Inputs, k)
			t.Used = append(t.Used, k)
		}
	}
	size := 0
	for _, in := range t.Inputs {
		size += len(in.Params)
	}
	for _, in := range req.GetAsk() {
		k := in.GetKey()
		if _, ok := t.Inputs[k]; ok || t.used(k) {
			return nil, invalid("input request key %q was used before in this task; keys are unique over a task's life", k)
		}
		t.Inputs[k] = taskInput{Seq: in.GetSeq(), Method: in.GetMethod(), Params: in.GetParamsJson()}
		size += len(in.GetParamsJson())
	}
	if len(t.Inputs) > maxTaskInputs || size > maxTaskInputBytes {
		return nil, invalid("a task may wait on at most %d requests of %d bytes of params together", maxTaskInputs, maxTaskInputBytes)
	}
	if n := len(t.Used); n > maxTaskUsedKeys {
		t.Used = t.Used[n-maxTaskUsedKeys:]
	}
	next := *rec
	t.InputRequired = len(t.Inputs) > 0
	next.Task = t
	return &next, nil
}

func (t *taskInfo) clone() *taskInfo {
	c := *t
	c.Inputs = make(map[string]taskInput, len(t.Inputs))
	for k, v := range t.Inputs {
		c.Inputs[k] = v
	}
	c.Used = append([]string(nil), t.Used...)
	return &c
}

func (t *taskInfo) used(key string) bool {
	for _, k := range t.Used {
		if k == key {
			return true
		}
	}
	return false
}

// putTaskRecord writes a running task's record if it is still the one at
// kv; it returns nil if it did, else the record as it is now.
func (s *Server) putTaskRecord(ctx context.Context, kv *mvccpb.KeyValue, next *callRecord) (*mvccpb.KeyValue, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
	).Then(
		clientv3.OpPut(string(kv.Key), encode(next), clientv3.WithIgnoreLease()),
	).Else(
		clientv3.OpGet(string(kv.Key)),
	).Commit()
	if err != nil {
		return nil, etcdErr(ctx, "update task", err)
	}
	if resp.Succeeded {
		return nil, nil
	}
	cur := resp.Responses[0].GetResponseRange().Kvs
	if len(cur) == 0 {
		return nil, fmt.Errorf("%w: task %s", ErrUnknownTask, next.CallID)
	}
	return cur[0], nil
}

// UpdateTask implements CoordinatorService.UpdateTask.
func (s *Server) UpdateTask(ctx context.Context, req *pb.UpdateTaskRequest) (*pb.UpdateTaskResponse, error) {
	resp, err := s.updateTask(ctx, req)
	return resp, toStatus(err)
}

func (s *Server) updateTask(ctx context.Context, req *pb.UpdateTaskRequest) (*pb.UpdateTaskResponse, error) {
	for k, v := range req.GetInputResponses() {
		if !json.Valid(v) {
			return nil, invalid("the answer under %q is not JSON", k)
		}
	}
	_, rec, kv, err := s.readTask(ctx, req.GetTaskId(), req.GetPrincipal(), false)
	if err != nil {
		return nil, err
	}
	for range 5 {
		next, taken := answered(rec, req.GetInputResponses())
		if len(taken) == 0 {
			return &pb.UpdateTaskResponse{CallId: rec.CallID, Task: s.taskProto(rec, kv.CreateRevision)}, nil
		}
		cur, err := s.putTaskRecord(ctx, kv, next)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return &pb.UpdateTaskResponse{
				Accepted: taken, CallId: rec.CallID, Scope: rec.Scope,
				WorkerAddress: s.view.address(rec.Worker), Task: s.taskProto(next, kv.CreateRevision),
			}, nil
		}
		if rec, err = decode[callRecord]("call", cur.Value); err != nil {
			return nil, err
		}
		kv = cur
	}
	return nil, fmt.Errorf("%w: task %s kept changing", ErrEtcd, rec.CallID)
}

// answered is rec with the outstanding requests that answers answer taken
// out, and those requests, in key order; nothing when the task is not
// running.
func answered(rec *callRecord, answers map[string][]byte) (*callRecord, []*pb.TaskInput) {
	if rec.State != stateRunning || rec.Task == nil {
		return rec, nil
	}
	t := rec.Task.clone()
	var taken []*pb.TaskInput
	for k := range answers {
		in, ok := t.Inputs[k]
		if !ok {
			continue // not outstanding: never asked, answered already, or withdrawn
		}
		delete(t.Inputs, k)
		t.Used = append(t.Used, k)
		taken = append(taken, &pb.TaskInput{Key: k, Seq: in.Seq, Method: in.Method, ParamsJson: in.Params})
	}
	sort.Slice(taken, func(i, j int) bool { return taken[i].Key < taken[j].Key })
	t.InputRequired = len(t.Inputs) > 0
	next := *rec
	next.Task = t
	return &next, taken
}

// taskInputs are the requests a running task waits on, in key order.
func taskInputs(rec *callRecord) []*pb.TaskInput {
	if rec.State != stateRunning || rec.Task == nil || len(rec.Task.Inputs) == 0 {
		return nil
	}
	out := make([]*pb.TaskInput, 0, len(rec.Task.Inputs))
	for k, in := range rec.Task.Inputs {
		out = append(out, &pb.TaskInput{Key: k, Seq: in.Seq, Method: in.Method, ParamsJson: in.Params})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// address is where a live worker serves, or "" if this replica knows no
// such worker.
func (v *view) address(worker string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.workers[worker]; e != nil {
		return e.info.Address
	}
	return ""
}
