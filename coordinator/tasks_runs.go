package coordinator

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// A task's run opens when its gateway executes it on the task's worker,
// right after CreateTask. A gateway lost in between would leave a task
// that nobody runs, failed only at its deadline (up to its TTL). So the
// gateway hands CreateTask the run as it will execute it, and the task
// keeps it, under task-runs/<worker>/<task>, from the transaction that
// creates the task to the decision that ends it (taskOps deletes it) or
// the task's lease. A worker asks for the runs of its tasks older than
// OrphanAfter (ListTaskRuns) and starts those it has not opened: the
// worker, which remembers every task run it opened, is the one place
// that can start a run exactly once. Runs are listed only to the worker
// registration the task was placed on: a worker restarted under the same
// name never starts a task its predecessor may have run (the janitor
// fails those as worker lost).

// maxTaskRunBytes bounds a stored run; a larger one (its arguments) is
// not kept, and its task, if its gateway is lost, fails at its deadline.
const maxTaskRunBytes = 256 << 10

// maxTaskRunsListed bounds one ListTaskRuns answer; the worker asks again.
const maxTaskRunsListed = 64

// storedRun is the value of task-runs/<worker>/<task>.
type storedRun struct {
	WorkerRev int64     `json:"worker_rev"` // the worker registration the task was placed on
	CreatedAt time.Time `json:"created_at"`
	Request   []byte    `json:"request"` // ExecuteRequest, but for its fence: the key's create revision
}

func (k keys) taskRunsOf(worker string) string  { return k.prefix + "task-runs/" + worker + "/" }
func (k keys) taskRun(worker, id string) string { return k.taskRunsOf(worker) + id }

// taskRunOp is the write that stores a new task's run, if the gateway
// sent one and it is within bounds; nil otherwise.
func (s *Server) taskRunOp(run *pb.ExecuteRequest, rec *callRecord, w *workerEntry) (clientv3.Op, bool) {
	if run == nil {
		return clientv3.Op{}, false
	}
	run = proto.CloneOf(run)
	run.CallId, run.Fence, run.Placement, run.Worker = rec.CallID, 0, nil, w.name
	run.Tool, run.Principal, run.Task, run.Progress = rec.Tool, rec.Principal, true, false
	run.Deadline = timestamppb.New(rec.Deadline)
	b, err := proto.Marshal(run)
	if err != nil || len(b) > maxTaskRunBytes {
		s.log.Warn("not keeping a task's run: it is too large to restart if its gateway is lost", "task", rec.CallID, "bytes", len(b))
		return clientv3.Op{}, false
	}
	v := encode(&storedRun{WorkerRev: w.createRev, CreatedAt: rec.RequestedAt, Request: b})
	return clientv3.OpPut(s.keys.taskRun(w.name, rec.CallID), v, clientv3.WithLease(clientv3.LeaseID(rec.Task.Lease))), true
}

// ListTaskRuns implements CoordinatorService.ListTaskRuns.
func (s *Server) ListTaskRuns(ctx context.Context, req *pb.ListTaskRunsRequest) (*pb.ListTaskRunsResponse, error) {
	resp, err := s.listTaskRuns(ctx, req.GetWorker())
	return resp, toStatus(err)
}

func (s *Server) listTaskRuns(ctx context.Context, worker string) (*pb.ListTaskRunsResponse, error) {
	if err := validateName("worker", worker); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).Then(
		clientv3.OpGet(s.keys.worker(worker), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.taskRunsOf(worker), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, etcdErr(octx, "list task runs", err)
	}
	reg := resp.Responses[0].GetResponseRange().Kvs
	out := &pb.ListTaskRunsResponse{}
	if len(reg) == 0 {
		return out, nil // not registered: no task may start on it
	}
	before := s.now().Add(-s.opts.Tasks.OrphanAfter)
	var gets []clientv3.Op
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		run, err := decode[storedRun]("task run", kv.Value)
		if err != nil || run.WorkerRev != reg[0].CreateRevision || run.CreatedAt.After(before) {
			continue
		}
		req := &pb.ExecuteRequest{}
		if err := proto.Unmarshal(run.Request, req); err != nil {
			s.log.Warn("skipping a stored task run that does not decode", "key", string(kv.Key), "err", err)
			continue
		}
		req.Fence = kv.CreateRevision // written by the transaction that created the task
		out.Runs = append(out.Runs, req)
		gets = append(gets, clientv3.OpGet(s.keys.call(req.CallId)))
		if len(out.Runs) == maxTaskRunsListed {
			break
		}
	}
	if len(gets) == 0 {
		return out, nil
	}
	// A decision deletes its task's run, but one made by a release that
	// kept no runs did not: list only tasks still running.
	recs, err := s.cli.Txn(octx).Then(gets...).Commit()
	if err != nil {
		return nil, etcdErr(octx, "read tasks of task runs", err)
	}
	running := out.Runs[:0]
	for i, r := range recs.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != out.Runs[i].Fence {
			continue
		}
		if rec, err := decode[callRecord]("call", kvs[0].Value); err == nil && rec.State == stateRunning {
			running = append(running, out.Runs[i])
		}
	}
	out.Runs = running
	return out, nil
}
