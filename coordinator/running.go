package coordinator

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// maxCachedCalls bounds the running-call cache; past it Begin caches
// nothing and decisions read the record from etcd instead.
const maxCachedCalls = 1 << 17

// runningCalls caches the records of the calls this replica began, as
// begun, so that deciding one (a cancel, a completion) needs no read
// before its transaction. A cached record is only a guess: the decision's
// transaction is guarded by the call's fence, so a call that has settled
// or been replaced since fails the guard and the caller falls back to
// reading etcd, exactly as it does on a miss.
//
// Removal, the one rule: an entry leaves as soon as the replica learns
// its call is no longer running at the cached fence: from a decision's
// transaction here (won, or its guard failed), or from the owners/ watch
// (a decision anywhere). The minute sweep drops, past its deadline, an
// entry nothing could tell about (a compaction, or a settlement the watch
// showed before Begin cached the call). byID and byIndex hold the same
// entries and lose them together.
type runningCalls struct {
	mu      sync.Mutex
	byID    map[string]*cachedCall
	byIndex map[string]*cachedCall
}

type cachedCall struct {
	rec   *callRecord // as begun: state running
	index string      // its index key
	fence int64
}

func newRunningCalls() *runningCalls {
	return &runningCalls{byID: map[string]*cachedCall{}, byIndex: map[string]*cachedCall{}}
}

func (r *runningCalls) add(rec *callRecord, index string, fence int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byID) >= maxCachedCalls {
		return
	}
	c := &cachedCall{rec: rec, index: index, fence: fence}
	r.byID[rec.CallID] = c
	r.byIndex[index] = c
}

// remove forgets a call known not to be running at its cached fence.
func (r *runningCalls) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(id)
}

func (r *runningCalls) removeLocked(id string) {
	if c, ok := r.byID[id]; ok {
		delete(r.byID, id)
		if r.byIndex[c.index] == c {
			delete(r.byIndex, c.index)
		}
	}
}

// byKey returns the cached call under an index key.
func (r *runningCalls) byKey(index string) (*cachedCall, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.byIndex[index]
	return c, ok
}

// call returns the cached call with this id and fence.
func (r *runningCalls) call(id string, fence int64) (*cachedCall, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.byID[id]
	if !ok || c.fence != fence {
		return nil, false
	}
	return c, true
}

// byCallID returns the cached call with this id, whatever its fence.
func (r *runningCalls) byCallID(id string) (*cachedCall, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.byID[id]
	return c, ok
}

// kv is the version of the call key the decision's guard expects: a
// running call's key has not changed since Begin wrote it at the fence.
func (c *cachedCall) kv(k keys) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(k.call(c.rec.CallID)), CreateRevision: c.fence, ModRevision: c.fence}
}

// expire forgets calls past their deadline. Settlements are normally
// removed as they happen (here or through the owners/ watch); this
// catches a call whose settlement this replica saw before it cached it.
func (r *runningCalls) expire(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, c := range r.byID {
		if now.After(c.rec.Deadline) {
			r.removeLocked(id)
		}
	}
}

// runExpiry sweeps the cache every minute until ctx is done.
func (s *Server) runExpiry(ctx context.Context) error {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			s.running.expire(s.now())
		}
	}
}
