package grpcserver

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// callLog logs each RPC that ends in an error, once, when it ends: every
// Begin and Cancel would drown the log. An RPC that ends well costs a
// clock read and a level check; the fields are built only for a line that
// is written. (go-grpc-middleware's logging interceptor builds its fields,
// start time and peer address formatted, for every RPC before it asks the
// level: 3% of the coordinator's CPU under load, for lines it then drops.)
type callLog struct{ log *slog.Logger }

// levelOf is the level an RPC that ended with code is logged at.
func levelOf(code codes.Code) slog.Level {
	switch code {
	case codes.OK, codes.Canceled, codes.NotFound, codes.AlreadyExists:
		return slog.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return slog.LevelError
	default:
		return slog.LevelWarn
	}
}

func (l callLog) finished(ctx context.Context, method, kind string, start time.Time, err error) {
	code := status.Code(err)
	lvl := levelOf(code)
	if !l.log.Enabled(ctx, lvl) {
		return
	}
	attrs := []slog.Attr{
		slog.String("grpc.method", method), slog.String("grpc.method_type", kind),
		slog.String("grpc.code", code.String()), slog.Duration("grpc.time", time.Since(start)),
	}
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", status.Convert(err).Message()))
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	l.log.LogAttrs(ctx, lvl, "finished call", attrs...)
}

func (l callLog) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	l.finished(ctx, info.FullMethod, "unary", start, err)
	return resp, err
}

func (l callLog) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	l.finished(ss.Context(), info.FullMethod, "stream", start, err)
	return err
}
