package coordinator

import (
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// WatchTask implements CoordinatorService.WatchTask: the task now, then
// again each time its status changes, until it is terminal. It follows
// the task's call record, so a change made at any replica is seen; the
// stream is bounded by the task's life, as an expired task's record is
// deleted and the stream then ends with the task unknown.
func (s *Server) WatchTask(req *pb.WatchTaskRequest, stream pb.CoordinatorService_WatchTaskServer) error {
	ctx := stream.Context()
	if err := s.waitReady(ctx); err != nil {
		return toStatus(err)
	}
	var last *pb.Task
	for {
		t, _, kv, err := s.readTask(ctx, req.GetTaskId(), req.GetPrincipal(), true)
		if err != nil {
			return toStatus(err)
		}
		if last == nil || t.GetStatus() != last.GetStatus() || t.GetStatusMessage() != last.GetStatusMessage() {
			if err := stream.Send(&pb.WatchTaskResponse{Task: t}); err != nil {
				return err
			}
			last = t
		}
		if terminalTask(t.GetStatus()) {
			return nil
		}
		if err := s.waitChange(ctx, string(kv.Key), kv.ModRevision+1); err != nil {
			return toStatus(err)
		}
	}
}
