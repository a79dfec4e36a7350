package coordinator

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var errWorkerSilent = errors.New("coordinator: worker went silent")

// workerLease is the etcd lease a replica holds for a worker attached to
// it, shaped as concurrency.Session. It is kept alive only while the
// worker is heard from: each message on the control stream (a heartbeat
// when there is nothing else) renews it, at most twice per heartbeat
// interval, so a worker that goes silent (blackholed, no FIN or RST)
// loses its lease within the TTL of the last thing it said, however long
// its stream lingers.
type workerLease struct {
	s     *Server
	id    clientv3.LeaseID
	ttl   time.Duration
	every time.Duration // the worker's heartbeat interval

	heard chan struct{} // a message arrived; capacity 1
	ctx   context.Context
	stop  context.CancelFunc // Orphan's
	done  chan struct{}      // closed when run returns
	err   error              // why the lease is no longer kept; set before done closes
}

// keepWorkerLease starts keeping id alive for a worker just heard from.
// The caller must Orphan or Close it. Once Run has ended it keeps nothing
// and returns errStopping.
func (s *Server) keepWorkerLease(id clientv3.LeaseID) (*workerLease, error) {
	l := &workerLease{
		s: s, id: id, ttl: s.opts.LeaseTTL, every: s.heartbeatInterval(),
		heard: make(chan struct{}, 1), done: make(chan struct{}),
	}
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.heard <- struct{}{} // an adopted lease may be close to expiry: renew it now
	if !s.leases.Go(l.run) {
		l.stop()
		return nil, errStopping
	}
	return l, nil
}

// heartbeatInterval is how often a worker must speak: three times a TTL.
func (s *Server) heartbeatInterval() time.Duration {
	return max(s.opts.LeaseTTL/3, 50*time.Millisecond)
}

// Heard records that the worker spoke. It never blocks.
func (l *workerLease) Heard() {
	select {
	case l.heard <- struct{}{}:
	default:
	}
}

// Done is closed when the lease is no longer kept alive: it was lost
// (expired, revoked), the worker fell silent for a TTL, or it was
// orphaned. Err says which.
func (l *workerLease) Done() <-chan struct{} { return l.done }

// Err is why Done closed: errLeaseLost, errWorkerSilent, or nil after
// Orphan.
func (l *workerLease) Err() error {
	<-l.done
	return l.err
}

// Orphan stops keeping the lease alive and waits for that to take
// effect. The lease lives out its TTL, so the worker can re-attach,
// perhaps to another replica, and adopt it. Idempotent.
func (l *workerLease) Orphan() {
	l.stop()
	<-l.done
}

// Close revokes the lease: the worker is leaving.
func (l *workerLease) Close(ctx context.Context) error {
	l.Orphan()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.s.opts.OpTimeout)
	defer cancel()
	_, err := l.s.cli.Revoke(ctx, l.id)
	return err
}

func (l *workerLease) run() {
	defer close(l.done)
	silence := time.NewTimer(l.ttl)
	defer silence.Stop()
	var renewed time.Time
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-silence.C:
			l.err = errWorkerSilent // the lease has expired by now, or is about to
			return
		case <-l.heard:
		}
		silence.Reset(l.ttl)
		if time.Since(renewed) < l.every/2 {
			continue // renewed lately; the lease still outlives what was heard by a TTL
		}
		renewed = time.Now()
		if err := l.renew(); err != nil {
			l.err = err
			return
		}
	}
}

// renew keeps the lease alive once. Only a lease etcd no longer has is
// fatal: while etcd is unreachable the next message tries again.
func (l *workerLease) renew() error {
	ctx, cancel := context.WithTimeout(l.ctx, l.s.opts.OpTimeout)
	defer cancel()
	_, err := l.s.cli.KeepAliveOnce(ctx, l.id)
	switch {
	case err == nil, l.ctx.Err() != nil:
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return errLeaseLost
	default:
		l.s.log.Warn("renewing a worker lease", "lease", int64(l.id), "err", err)
		return nil
	}
}
