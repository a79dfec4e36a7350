package coordinator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// An MCP task is a call record with a task (taskInfo): its id is the call
// id, its status is the call's state (working while it runs, unless the
// call waits for its client's input), and it lives on its own lease, whose
// TTL is the task's. Three keys make it:
//
//	calls/<call>                        the call record, as for any call
//	tasks/<principal>/<call>            the task, on the task's lease: only
//	                                    its principal finds it, and it is
//	                                    gone when the TTL passes
//	task-results/<call>                 the result, gzipped, on the task's
//	                                    lease, written by the completion's
//	                                    own decision transaction
//
// Every move of the status is the call's decision (settle): one
// transaction guarded by the call record's revision, so a terminal status
// never moves, and a cancelled task stays cancelled whatever its work
// does; a completion that loses writes no result. A task's call is in no
// scope's running set: neither a session's close nor a client's
// disconnect cancels it; only CancelTask, its deadline (its TTL) or a
// failure (its worker lost) ends it.

// TaskOptions bounds MCP tasks. The zero value of every field means its
// default.
type TaskOptions struct {
	// DefaultTTL applies to tasks that ask for none (default 1h); MaxTTL
	// caps what a task may ask for (default 24h, at most the longest call
	// timeout). A task's call runs at most its TTL.
	DefaultTTL, MaxTTL time.Duration
	// MaxPerPrincipal is how many live tasks one principal may hold
	// (default 100). The count is read before a task is created, so
	// concurrent creations may pass it by a few.
	MaxPerPrincipal int
	// MaxResultBytes bounds a task's stored result, after compression
	// (default 1 MiB). A larger result fails the task, saying so.
	MaxResultBytes int
	// PollInterval is what clients are told to poll at (default 1s).
	PollInterval time.Duration
	// OrphanAfter is how long a task's run may wait for its gateway to
	// open it before the task's worker starts it itself (default 10s;
	// tasks_runs.go).
	OrphanAfter time.Duration
}

// setDefaults fills in the default of every zero field (Options'
// setDefaults then bounds the TTLs by MaxTimeout).
func (o *TaskOptions) setDefaults() {
	if o.DefaultTTL == 0 {
		o.DefaultTTL = time.Hour
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = 24 * time.Hour
	}
	if o.MaxPerPrincipal == 0 {
		o.MaxPerPrincipal = 100
	}
	if o.MaxResultBytes == 0 {
		o.MaxResultBytes = 1 << 20
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.OrphanAfter == 0 {
		o.OrphanAfter = 10 * time.Second
	}
}

// taskInfo is what a call record holds of its task.
type taskInfo struct {
	Lease int64 `json:"lease"`
	TTLMs int64 `json:"ttl_ms"`
	// InputRequired says the running call waits for its client's input:
	// Inputs is not empty (tasks_input.go).
	InputRequired bool `json:"input_required,omitempty"`
	// Inputs are the requests the call waits on, by key; Used, the keys
	// answered or withdrawn, which the task may not use again.
	Inputs map[string]taskInput `json:"inputs,omitempty"`
	Used   []string             `json:"used_keys,omitempty"`
}

// taskEntry is the value of tasks/<principal>/<call>.
type taskEntry struct {
	CallID    string    `json:"call_id"`
	Tool      string    `json:"tool"`
	CreatedAt time.Time `json:"created_at"`
}

// taskWrite is what a decision writes for a task's call.
type taskWrite struct {
	result  []byte // the gzipped result of a completion
	expired bool   // the task's lease is gone: write nothing of it
}

func (r *callRecord) taskID() string {
	if r.Task == nil {
		return ""
	}
	return r.CallID
}

func (k keys) tasksOf(principal string) string {
	return k.prefix + "tasks/" + base64.RawURLEncoding.EncodeToString([]byte(principal)) + "/"
}
func (k keys) task(principal, id string) string { return k.tasksOf(principal) + id }
func (k keys) taskResult(id string) string      { return k.prefix + "task-results/" + id }

// errTaskExpired says a decision could not write its task's keys because
// the task's lease is gone.
var errTaskExpired = errors.New("coordinator: the task expired")

// taskOps are the writes a decision adds for a task's call: its stored
// run goes (tasks_runs.go), and a completion's result is kept, on the
// task's lease.
func (s *Server) taskOps(rec *callRecord, d decision) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpDelete(s.keys.taskRun(rec.Worker, rec.CallID))}
	if d.state != stateCompleted || d.task.result == nil || d.task.expired {
		return ops
	}
	return append(ops, clientv3.OpPut(s.keys.taskResult(rec.CallID), string(d.task.result), clientv3.WithLease(clientv3.LeaseID(rec.Task.Lease))))
}

// taskLeaseGone says whether a decision that failed for a missing lease
// failed for its task's: the task's TTL passed.
func (s *Server) taskLeaseGone(ctx context.Context, rec *callRecord, d decision) bool {
	if rec.Task == nil || d.task.result == nil {
		return false
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(rec.Task.Lease))
	return err == nil && resp.TTL <= 0
}

// withTaskResult adds a task's result to its completion. A result over the
// bound, compressed, fails the task instead, saying so.
func (s *Server) withTaskResult(rec *callRecord, d decision, result []byte) decision {
	if rec.Task == nil || d.state != stateCompleted {
		return d
	}
	if len(result) == 0 {
		result = []byte(`{"content":[]}`)
	}
	gz := gzipped(result)
	if len(gz) > s.opts.Tasks.MaxResultBytes {
		return decision{
			state: stateFailed, initiator: InitiatorName(pb.Initiator_INITIATOR_TOOL), owner: true, stoppedAt: d.stoppedAt,
			reason: fmt.Sprintf("the task's result is %d bytes compressed; a task's result may be at most %d", len(gz), s.opts.Tasks.MaxResultBytes),
		}
	}
	d.task.result = gz
	return d
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b) // writes to a bytes.Buffer do not fail
	zw.Close()
	return buf.Bytes()
}

func gunzipped(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: task result: %v", errCorrupt, err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%w: task result: %v", errCorrupt, err)
	}
	return out, nil
}

// taskStatus is the task status of a task's call record.
func taskStatus(rec *callRecord) pb.TaskStatus {
	switch rec.State {
	case stateCompleted:
		return pb.TaskStatus_TASK_STATUS_COMPLETED
	case stateFailed:
		return pb.TaskStatus_TASK_STATUS_FAILED
	case stateCancelled:
		return pb.TaskStatus_TASK_STATUS_CANCELLED
	}
	if rec.Task != nil && rec.Task.InputRequired {
		return pb.TaskStatus_TASK_STATUS_INPUT_REQUIRED
	}
	return pb.TaskStatus_TASK_STATUS_WORKING
}

// taskProto is the task of a call record; fence is the call's.
func (s *Server) taskProto(rec *callRecord, fence int64) *pb.Task {
	t := &pb.Task{
		TaskId: rec.CallID, Status: taskStatus(rec), Tool: rec.Tool,
		CreatedAt: timestamppb.New(rec.RequestedAt), LastUpdatedAt: timestamppb.New(rec.RequestedAt),
		Ttl:          durationpb.New(time.Duration(rec.Task.TTLMs) * time.Millisecond),
		PollInterval: durationpb.New(s.opts.Tasks.PollInterval),
		Worker:       rec.Worker, Fence: fence,
	}
	if t.Status == pb.TaskStatus_TASK_STATUS_INPUT_REQUIRED {
		t.InputRequests = taskInputs(rec)
	}
	if !rec.SettledAt.IsZero() {
		t.LastUpdatedAt = timestamppb.New(rec.SettledAt)
	}
	if rec.State == stateFailed || rec.State == stateCancelled {
		t.StatusMessage, t.Initiator = rec.Reason, initiatorFromName(rec.Initiator)
	}
	return t
}

// taskTTL is the TTL a task asked for, within the bounds.
func (s *Server) taskTTL(d *durationpb.Duration) time.Duration {
	ttl := d.AsDuration()
	if d == nil || ttl <= 0 {
		ttl = s.opts.Tasks.DefaultTTL
	}
	return max(min(ttl, s.opts.Tasks.MaxTTL), time.Second)
}
