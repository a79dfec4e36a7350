package coordinator

import (
	"context"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// CancelTask implements CoordinatorService.CancelTask: the client's
// cancellation of one of its principal's tasks, the same fenced decision
// as any cancel. When it wins, the task is cancelled (and audited) before
// the reply, and its worker is told to stop; when the task was terminal
// already, nothing changes and the reply says how it ended.
func (s *Server) CancelTask(ctx context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	resp, err := s.cancelTask(ctx, req)
	return resp, toStatus(err)
}

func (s *Server) cancelTask(ctx context.Context, req *pb.CancelTaskRequest) (*pb.CancelTaskResponse, error) {
	_, rec, kv, err := s.readTask(ctx, req.GetTaskId(), req.GetPrincipal(), false)
	if err != nil {
		return nil, err
	}
	reason := SanitizeReason(req.GetReason())
	if reason == "" {
		reason = "tasks/cancel"
	}
	d := decision{state: stateCancelled, initiator: InitiatorName(pb.Initiator_INITIATOR_CLIENT), reason: reason, late: true}
	v, err := s.settle(ctx, rec, kv, d)
	if err != nil {
		return nil, err
	}
	s.metrics.cancels.WithLabelValues(cancelResultLabel(cancelResults[v.result])).Inc()
	if v.result == won {
		next := *rec
		next.State, next.Initiator, next.Reason, next.SettledAt = d.state, d.initiator, d.reason, s.now()
		return &pb.CancelTaskResponse{Cancelled: true, Task: s.taskProto(&next, kv.CreateRevision)}, nil
	}
	return &pb.CancelTaskResponse{Task: s.taskProto(v.by, kv.CreateRevision)}, nil
}
