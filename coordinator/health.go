package coordinator

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Health is the replica's gRPC health service (grpc.health.v1), for the
// overall server ("") and for CoordinatorService. It says SERVING only
// while the replica can decide calls now: its view is loaded, etcd
// answers a linearizable read within the probe's bound, and its watches
// of workers and owners are open. Register it with the gRPC server; Run
// keeps it current and shuts it down (NOT_SERVING for good) when it ends.
func (s *Server) Health() *health.Server { return s.health.hs }

// healthState tracks what the replica's health rests on.
type healthState struct {
	hs *health.Server

	// changed has a token when a watch opened or closed: runHealth looks
	// again at once rather than at its next interval.
	changed chan struct{}

	mu       sync.Mutex
	watching map[string]bool // watched prefix -> open
	serving  bool
}

func newHealthState() *healthState {
	h := &healthState{hs: health.NewServer(), watching: map[string]bool{}, changed: make(chan struct{}, 1)}
	h.setLocked(false)
	return h
}

// watch records whether the watch of prefix is open.
func (h *healthState) watch(prefix string, open bool) {
	h.mu.Lock()
	was := h.watching[prefix]
	h.watching[prefix] = open
	h.mu.Unlock()
	if was != open {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

func (h *healthState) watchesOpen(prefixes ...string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range prefixes {
		if !h.watching[p] {
			return false
		}
	}
	return true
}

func (h *healthState) set(serving bool) (changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.serving == serving {
		return false
	}
	h.setLocked(serving)
	return true
}

func (h *healthState) setLocked(serving bool) {
	h.serving = serving
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.hs.SetServingStatus("", st)
	h.hs.SetServingStatus(pb.CoordinatorService_ServiceDesc.ServiceName, st)
}

// runHealth probes etcd every HealthInterval, and at once when a watch
// opens or closes (a replica starting serves as soon as its watches are
// open, not an interval later), until ctx is done; then it shuts the
// health service down.
func (s *Server) runHealth(ctx context.Context) error {
	defer s.health.hs.Shutdown()
	t := time.NewTicker(s.opts.HealthInterval)
	defer t.Stop()
	for {
		ok := s.probe(ctx) && s.health.watchesOpen(s.keys.workers(), s.keys.owners())
		if s.health.set(ok) {
			s.log.Info("health changed", "serving", ok)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-s.health.changed:
		}
	}
}

// probe says whether etcd answers a linearizable read, which needs a
// quorum, as every decision does.
func (s *Server) probe(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, min(s.opts.OpTimeout, 2*s.opts.HealthInterval))
	defer cancel()
	_, err := s.cli.Get(ctx, s.keys.prefix+"health", clientv3.WithCountOnly())
	return err == nil
}
