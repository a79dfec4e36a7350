package worker

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// A task's run opens when its gateway executes it here, right after the
// task is created. If that gateway is lost in between, nobody would: the
// coordinator keeps each task's run until the task ends, and the worker
// asks it, every TaskRunScan, for the runs of its tasks that waited
// longer than the coordinator's bound, and starts them itself.
//
// A run opens here at most once: opened remembers every task this
// worker process opened, by any way, until the task's deadline, and a
// second Execute of it is refused with AlreadyExists. A task is placed on
// one worker registration, and the coordinator lists its run to that
// registration only, so a worker restarted under the same name does not
// start a task its predecessor may have run.

// scanTaskRuns starts, every TaskRunScan until ctx ends, the task runs
// the coordinator says no gateway opened. Each run it starts is one of
// g's goroutines.
func (w *Worker) scanTaskRuns(ctx context.Context, start func(func())) {
	t := time.NewTicker(w.opts.TaskRunScan)
	defer t.Stop()
	unsupported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.forgetEndedTasks()
		select {
		case <-w.Ready():
		default:
			continue // not attached: no task may start here yet
		}
		actx, cancel := context.WithTimeout(ctx, w.opts.TaskRunScan)
		resp, err := w.coord.ListTaskRuns(actx, &pb.ListTaskRunsRequest{Worker: w.opts.Name})
		cancel()
		switch {
		case status.Code(err) == codes.Unimplemented:
			if !unsupported {
				w.log.Info("the coordinator keeps no task runs (an older release): a task whose gateway is lost before it starts waits for its deadline")
				unsupported = true
			}
			continue
		case err != nil:
			w.log.Debug("cannot list task runs", "err", err)
			continue
		}
		for _, run := range resp.GetRuns() {
			if w.wasOpened(run.GetCallId()) {
				continue
			}
			start(func() { w.openOrphan(ctx, run) })
		}
	}
}

// openOrphan runs a task that no gateway opened.
func (w *Worker) openOrphan(ctx context.Context, run *pb.ExecuteRequest) {
	w.log.Info("starting a task its gateway did not start", "task", run.GetCallId(), "tool", run.GetTool())
	err := service{Worker: w}.Execute(run, orphanStream{ctx: context.WithoutCancel(ctx)})
	switch status.Code(err) {
	case codes.AlreadyExists: // a gateway opened it meanwhile
	case codes.OK:
		w.metrics.orphanRuns.Inc()
	default:
		w.metrics.orphanRuns.Inc()
		w.log.Warn("a task its gateway did not start ended in error", "task", run.GetCallId(), "err", err)
	}
}

// wasOpened says whether the task's run opened here already.
func (w *Worker) wasOpened(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.opened[id]
	return ok
}

// openTaskLocked records that the task's run opens here, or says it did
// already.
func (w *Worker) openTaskLocked(id string, deadline time.Time) error {
	if _, ok := w.opened[id]; ok {
		return status.Error(codes.AlreadyExists, "the task's run has opened on this worker already")
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(maxTaskMemory)
	}
	w.opened[id] = deadline
	return nil
}

// forgetEndedTasks forgets the tasks past their deadline: their runs can
// no longer be listed.
func (w *Worker) forgetEndedTasks() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, d := range w.opened {
		if d.Before(now) {
			delete(w.opened, id)
		}
	}
}

// maxTaskMemory is how long a task without a deadline is remembered.
const maxTaskMemory = 24 * time.Hour

// orphanStream is the Execute stream of a task run the worker opened
// itself: nobody listens to it. The task's outcome goes to the
// coordinator with its completion, as every task's does; its progress
// reaches no one.
type orphanStream struct{ ctx context.Context }

func (s orphanStream) Send(*pb.ExecuteResponse) error { return nil }
func (s orphanStream) SetHeader(metadata.MD) error    { return nil }
func (s orphanStream) SendHeader(metadata.MD) error   { return nil }
func (s orphanStream) SetTrailer(metadata.MD)         {}
func (s orphanStream) Context() context.Context       { return s.ctx }
func (s orphanStream) SendMsg(any) error              { return nil }
func (s orphanStream) RecvMsg(any) error              { return io.EOF }
