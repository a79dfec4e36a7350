package coordinator

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Task list paging.
const (
	defaultTaskPage = 50
	maxTaskPage     = 100
)

// GetTask implements CoordinatorService.GetTask.
func (s *Server) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	t, _, _, err := s.readTask(ctx, req.GetTaskId(), req.GetPrincipal(), req.GetWithResult())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.GetTaskResponse{Task: t}, nil
}

// readTask reads one of the principal's tasks linearizably, in one
// round trip: its entry (which only its principal's key holds), its call
// and, if asked, its result. It returns the call record and its kv too.
func (s *Server) readTask(ctx context.Context, id, principal string, withResult bool) (*pb.Task, *callRecord, *mvccpb.KeyValue, error) {
	if !validCallID(id) {
		return nil, nil, nil, ErrUnknownTask // task ids are ours: anything else names no task
	}
	ops := []clientv3.Op{clientv3.OpGet(s.keys.task(principal, id), clientv3.WithKeysOnly()), clientv3.OpGet(s.keys.call(id))}
	if withResult {
		ops = append(ops, clientv3.OpGet(s.keys.taskResult(id)))
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).Then(ops...).Commit()
	if err != nil {
		return nil, nil, nil, etcdErr(octx, "get task", err)
	}
	entry, call := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(entry) == 0 || len(call) == 0 {
		return nil, nil, nil, ErrUnknownTask
	}
	rec, err := decode[callRecord]("call", call[0].Value)
	if err != nil {
		return nil, nil, nil, err
	}
	if rec.Task == nil || rec.Principal != principal {
		return nil, nil, nil, ErrUnknownTask
	}
	t := s.taskProto(rec, call[0].CreateRevision)
	if withResult && t.Status == pb.TaskStatus_TASK_STATUS_COMPLETED {
		if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
			if t.ResultJson, err = gunzipped(kvs[0].Value); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	return t, rec, call[0], nil
}

// WaitTask implements CoordinatorService.WaitTask: it watches the task's
// call until it is terminal, then reads it with its result.
func (s *Server) WaitTask(ctx context.Context, req *pb.WaitTaskRequest) (*pb.WaitTaskResponse, error) {
	t, err := s.waitTask(ctx, req.GetTaskId(), req.GetPrincipal())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.WaitTaskResponse{Task: t}, nil
}

func (s *Server) waitTask(ctx context.Context, id, principal string) (*pb.Task, error) {
	for {
		t, _, kv, err := s.readTask(ctx, id, principal, true)
		if err != nil || terminalTask(t.GetStatus()) {
			return t, err
		}
		if err := s.waitChange(ctx, string(kv.Key), kv.ModRevision+1); err != nil {
			return nil, err
		}
	}
}

// waitChange returns once key changes at or after rev, or ctx ends.
func (s *Server) waitChange(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, key, clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			return etcdErr(ctx, "watch task", err)
		}
		if len(resp.Events) > 0 {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return etcdErr(ctx, "watch task", context.Canceled)
}

func terminalTask(st pb.TaskStatus) bool {
	return st == pb.TaskStatus_TASK_STATUS_COMPLETED || st == pb.TaskStatus_TASK_STATUS_FAILED || st == pb.TaskStatus_TASK_STATUS_CANCELLED
}

// ListTasks implements CoordinatorService.ListTasks: the principal's live
// tasks in task id order, a page at a time; each page is two reads.
func (s *Server) ListTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
	resp, err := s.listTasks(ctx, req)
	return resp, toStatus(err)
}

func (s *Server) listTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
	size := int64(req.GetPageSize())
	if size <= 0 {
		size = defaultTaskPage
	}
	size = min(size, maxTaskPage)
	prefix := s.keys.tasksOf(req.GetPrincipal())
	from := prefix
	if tok := req.GetPageToken(); tok != "" {
		if !validCallID(tok) {
			return nil, invalid("page token is not one this server gave")
		}
		from = prefix + tok + "\x00"
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	page, err := s.cli.Get(octx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithLimit(size), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcdErr(octx, "list tasks", err)
	}
	out := &pb.ListTasksResponse{}
	if len(page.Kvs) == 0 {
		return out, nil
	}
	ops := make([]clientv3.Op, 0, len(page.Kvs))
	for _, kv := range page.Kvs {
		ops = append(ops, clientv3.OpGet(s.keys.call(strings.TrimPrefix(string(kv.Key), prefix))))
	}
	calls, err := s.cli.Txn(octx).Then(ops...).Commit()
	if err != nil {
		return nil, etcdErr(octx, "list tasks", err)
	}
	for _, r := range calls.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // settled and past retention; its entry expires with its lease
		}
		rec, err := decode[callRecord]("call", kvs[0].Value)
		if err != nil || rec.Task == nil || rec.Principal != req.GetPrincipal() {
			continue
		}
		out.Tasks = append(out.Tasks, s.taskProto(rec, kvs[0].CreateRevision))
	}
	if page.More {
		out.NextPageToken = strings.TrimPrefix(string(page.Kvs[len(page.Kvs)-1].Key), prefix)
	}
	return out, nil
}
