package coordinator

import (
	"context"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Hooks for the external tests.

// CacheStale puts a call that settled back into s's running-call cache, as
// if this replica had cached it after seeing it settle.
func (s *Server) CacheStale(rec []byte, indexKey string, fence int64) {
	r, err := decode[callRecord]("call", rec)
	if err != nil {
		panic(err)
	}
	r.State = stateRunning
	s.running.add(r, indexKey, fence)
}

// CachedCalls says how many calls s's running-call cache holds.
func (s *Server) CachedCalls() int {
	s.running.mu.Lock()
	defer s.running.mu.Unlock()
	return len(s.running.byID)
}

// StartPaused runs Start for req, calling placed with the placement
// before the Begin goes to etcd, as a Begin held up in the committer's
// queue would be: what placed does (a decision through another replica)
// happens first. It returns Start's last message.
func (s *Server) StartPaused(ctx context.Context, req *pb.BeginRequest, placed func(*pb.BeginResponse)) (*pb.StartResponse, error) {
	var last *pb.StartResponse
	err := s.start(ctx, req, func(m *pb.StartResponse) error {
		if p := m.GetPlaced(); p != nil {
			placed(p)
		}
		last = m
		return nil
	})
	return last, err
}
