package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// Task support of a tool (MCP execution.taskSupport).
const (
	taskForbidden = "forbidden"
	taskOptional  = "optional"
	taskRequired  = "required"
)

// CreateTask implements CoordinatorService.CreateTask.
func (s *Server) CreateTask(ctx context.Context, req *pb.CreateTaskRequest) (*pb.CreateTaskResponse, error) {
	resp, err := s.createTask(ctx, req)
	return resp, toStatus(err)
}

func (s *Server) createTask(ctx context.Context, req *pb.CreateTaskRequest) (*pb.CreateTaskResponse, error) {
	if err := validateBegin(&pb.BeginRequest{Key: req.GetKey(), Tool: req.GetTool(), Principal: req.GetPrincipal(), Gateway: req.GetGateway()}); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := s.underTaskLimit(ctx, req.GetPrincipal()); err != nil {
		return nil, err
	}
	ttl := s.taskTTL(req.GetTtl())
	now := s.now()
	rec := &callRecord{
		Scope: req.GetKey().GetScope(), Principal: req.GetPrincipal(),
		RequestID: client.RequestIDJSON(req.GetKey().GetRequestId()),
		Tool:      req.GetTool(), Gateway: req.GetGateway(), State: stateRunning,
		RequestedAt: now, Deadline: now.Add(ttl),
		Task: &taskInfo{TTLMs: ttl.Milliseconds()},
	}
	lease, err := s.grantTaskLease(ctx, ttl)
	if err != nil {
		return nil, err
	}
	rec.Task.Lease = int64(lease)
	for range 5 {
		w, err := s.view.pick(methodToolsCall, rec.Tool, "")
		if errors.Is(err, ErrUnknownTool) {
			if err = s.view.refreshWorkers(ctx); err == nil {
				w, err = s.view.pick(methodToolsCall, rec.Tool, "")
			}
		}
		if err != nil {
			s.revokeTaskLease(ctx, lease)
			return nil, err
		}
		if ts := w.tools[rec.Tool].TaskSupport; ts != taskOptional && ts != taskRequired {
			s.revokeTaskLease(ctx, lease)
			return nil, invalid("tool %s does not run as a task", rec.Tool)
		}
		rec.CallID, rec.Worker = randid.New(16), w.name
		fence, err := s.createTaskTxn(ctx, rec, w, req.GetRun())
		switch {
		case err == nil:
			s.view.addOwner(w.name, rec.CallID)
			s.metrics.tasksCreated.Inc()
			return &pb.CreateTaskResponse{
				Task: s.taskProto(rec, fence), WorkerAddress: w.info.Address, Deadline: timestamppb.New(rec.Deadline),
			}, nil
		case errors.Is(err, errWorkerGone):
			s.view.forgetWorker(w.name, w.createRev)
		default:
			s.revokeTaskLease(ctx, lease)
			return nil, err
		}
	}
	s.revokeTaskLease(ctx, lease)
	return nil, fmt.Errorf("%w: the task could not be placed after several tries", ErrNoCapacity)
}

// underTaskLimit checks that the principal may hold one more task.
func (s *Server) underTaskLimit(ctx context.Context, principal string) error {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keys.tasksOf(principal), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return etcdErr(ctx, "count tasks", err)
	}
	if resp.Count >= int64(s.opts.Tasks.MaxPerPrincipal) {
		return fmt.Errorf("%w: %d live tasks, the limit; cancel one or wait for one to expire", ErrTooManyTasks, resp.Count)
	}
	return nil
}

func (s *Server) grantTaskLease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	secs := int64(ttl.Seconds() + 0.999)
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return 0, etcdErr(ctx, "grant task lease", err)
	}
	return resp.ID, nil
}

// revokeTaskLease drops the lease of a task that was not created; if it
// fails, the lease expires on its own.
func (s *Server) revokeTaskLease(ctx context.Context, id clientv3.LeaseID) {
	ctx, cancel := s.opCtx(context.WithoutCancel(ctx))
	defer cancel()
	s.cli.Revoke(ctx, id)
}

// createTaskTxn writes the task's call record, its owner key, its task
// entry and its run in one transaction, if the worker is still the one we
// saw and the session has not been closed. It returns the fence.
func (s *Server) createTaskTxn(ctx context.Context, rec *callRecord, w *workerEntry, run *pb.ExecuteRequest) (int64, error) {
	lease, err := s.begunLease.lease(ctx) // as Begin's: it outlives the call's last possible decision
	if err != nil {
		return 0, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	wk := s.keys.worker(w.name)
	closed := s.keys.sessionClosed(rec.Scope)
	entry := encode(&taskEntry{CallID: rec.CallID, Tool: rec.Tool, CreatedAt: rec.RequestedAt})
	writes := []clientv3.Op{
		clientv3.OpPut(s.keys.call(rec.CallID), encode(rec), clientv3.WithLease(lease)),
		clientv3.OpPut(s.keys.owner(w.name, rec.CallID), ""),
		clientv3.OpPut(s.keys.task(rec.Principal, rec.CallID), entry, clientv3.WithLease(clientv3.LeaseID(rec.Task.Lease))),
	}
	if op, ok := s.taskRunOp(run, rec, w); ok {
		writes = append(writes, op)
	}
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(wk), "=", w.createRev),
		clientv3.Compare(clientv3.CreateRevision(closed), "=", 0),
	).Then(writes...).Else(
		clientv3.OpGet(closed, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.begunLease.forget(lease)
		}
		return 0, etcdErr(ctx, "create task", err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if len(resp.Responses[0].GetResponseRange().Kvs) > 0 {
		return 0, fmt.Errorf("%w: scope %s", ErrSessionClosed, rec.Scope)
	}
	return 0, errWorkerGone
}
