package coordinator

import (
	"fmt"
	"sync"
)

// errStopping answers work that would start after Run has ended: the
// gRPC server may outlive Run briefly, and a worker re-attaching then
// must not start goroutines that Run no longer waits for.
var errStopping = fmt.Errorf("%w: the replica is stopping", ErrEtcd)

// group is a sync.WaitGroup that takes no new goroutine once closed.
// Run closes it before it waits, so that no Go can race the Wait (a
// WaitGroup's Add from zero must happen before its Wait); a handler that
// arrives late is refused instead. The zero value is open.
type group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f in a goroutine of the group unless it is closed, and says
// whether it did.
func (g *group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// close refuses new goroutines from now on.
func (g *group) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// wait closes the group and waits for its goroutines to return.
func (g *group) wait() {
	g.close()
	g.wg.Wait()
}
