package coordinator

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
