// Package grpcserver builds every gRPC server of mcpcancel (the
// coordinator's, the worker's, and those tests and benchmarks start) the
// same way: recovery from handler panics, a log of the calls that fail
// (log/slog), Prometheus server metrics, bounded message sizes, and
// keepalive, so that a silent client is noticed without TCP's help.
package grpcserver

import (
	"context"
	"log/slog"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// MaxMessageBytes bounds every message a server receives or sends.
const MaxMessageBytes = 4 << 20

// Keepalive says how a server notices a silent client and which pings it
// accepts. The zero value of each field means its default.
type Keepalive struct {
	// Time is how long a connection may be idle before the server pings
	// the client (default 10s; gRPC allows no less than 1s).
	Time time.Duration
	// Timeout is how long the server waits for the ping's answer before it
	// closes the connection (default 5s).
	Timeout time.Duration
	// MinPing is the shortest interval between a client's pings that the
	// server tolerates (default 1s, a tenth of the 10s floor gRPC clients
	// use for keepalive). The server measures the interval when it reads
	// a ping, so on a loaded host a late-read ping and the next on-time one
	// arrive close together, and Go clients add flow-control (BDP) pings
	// of their own; a tight bound turned those into "too_many_pings"
	// GOAWAYs that cut every RPC on the connection (seen under load in
	// TestRaceCompleteVsCancel). A ping a second still costs nothing.
	MinPing time.Duration
}

// setDefaults fills in the default of every zero (or negative) field.
func (k *Keepalive) setDefaults() {
	if k.Time <= 0 {
		k.Time = 10 * time.Second
	}
	if k.Timeout <= 0 {
		k.Timeout = 5 * time.Second
	}
	if k.MinPing <= 0 {
		k.MinPing = time.Second
	}
}

// ServerOptions are k's keepalive parameters and enforcement policy.
// Clients may ping with no stream open: an idle connection to a dead peer
// is found before a call is placed on it.
func (k Keepalive) ServerOptions() []grpc.ServerOption {
	k.setDefaults()
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: k.Time, Timeout: k.Timeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: k.MinPing, PermitWithoutStream: true}),
	}
}

// New builds a gRPC server with Options, the keepalive of ka, and a span
// per RPC when the process traces (internal/telemetry); extra options
// (transport security, authorization) come last.
func New(log *slog.Logger, reg prometheus.Registerer, ka Keepalive, extra ...grpc.ServerOption) *grpc.Server {
	opts := append(Options(log, reg), ka.ServerOptions()...)
	opts = append(opts, telemetry.ServerOption())
	return grpc.NewServer(append(opts, extra...)...)
}

// Options returns the server options without keepalive: interceptors
// (recovery outermost, then metrics, then the log of failed calls) and
// message limits. Server metrics are registered with reg. Build servers
// with New.
func Options(log *slog.Logger, reg prometheus.Registerer) []grpc.ServerOption {
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(metrics)
	rec := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "gRPC handler panicked", "panic", p)
		return status.Error(codes.Internal, "internal error")
	})
	lg := callLog{log}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(rec),
			metrics.UnaryServerInterceptor(),
			lg.unary,
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(rec),
			metrics.StreamServerInterceptor(),
			lg.stream,
		),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		// A connection that has not finished its handshake in this long
		// is closed: grpc's default (120 s) would hold a graceful stop,
		// and even Stop, that long for a peer that went silent mid-way
		// (the robustness harness's silent proxies found it).
		grpc.ConnectionTimeout(HandshakeTimeout),
	}
}

// HandshakeTimeout bounds a new connection's TLS and HTTP/2 handshake.
const HandshakeTimeout = 5 * time.Second

// Stop stops gs gracefully, and at once when that takes over grace: a
// peer that never closes its connection holds a graceful stop forever.
func Stop(gs *grpc.Server, grace time.Duration) {
	stopped := make(chan struct{})
	go func() { // owned here: Stop below makes GracefulStop return
		gs.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		gs.Stop()
		<-stopped
	}
}
