// Package grpcserver builds the gRPC servers of the coordinator and the
// worker the same way: recovery from handler panics, structured logging
// of calls (log/slog), Prometheus server metrics, and bounded message
// sizes.
package grpcserver

import (
	"context"
	"log/slog"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxMessageBytes bounds every message a server receives or sends.
const MaxMessageBytes = 4 << 20

// Options returns the server options: interceptors (recovery outermost,
// then metrics, then logging) and message limits. Server metrics are
// registered with reg.
func Options(log *slog.Logger, reg prometheus.Registerer) []grpc.ServerOption {
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(metrics)
	rec := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "gRPC handler panicked", "panic", p)
		return status.Error(codes.Internal, "internal error")
	})
	lg := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	// Log only calls that end in an error: every Begin and Cancel would
	// drown the log.
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(func(c codes.Code) logging.Level {
			switch c {
			case codes.OK, codes.Canceled, codes.NotFound, codes.AlreadyExists:
				return logging.LevelDebug
			case codes.Internal, codes.Unknown, codes.DataLoss:
				return logging.LevelError
			default:
				return logging.LevelWarn
			}
		}),
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(rec),
			metrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(lg, logOpts...),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(rec),
			metrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(lg, logOpts...),
		),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
	}
}
