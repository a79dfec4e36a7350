package grpcserver

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
)

// Run: go test ./internal/grpcserver -run '^$' -bench CallLog -benchmem -count 6
//
// BenchmarkCallLog is the log interceptor's cost for an RPC that ends well
// (every Begin, Complete and Cancel), logged at Info as in production:
// ours, and go-grpc-middleware's logging interceptor with the options the
// servers used before, which builds its fields for every RPC.
func BenchmarkCallLog(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}), time.Minute)
	defer cancel()
	info := &grpc.UnaryServerInfo{FullMethod: "/mcpcancel.v1.CoordinatorService/Begin"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("callLog", func(b *testing.B) {
		l := callLog{log}
		for b.Loop() {
			l.unary(ctx, nil, info, handler)
		}
	})
	b.Run("go-grpc-middleware", func(b *testing.B) {
		lg := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
			log.Log(ctx, slog.Level(lvl), msg, fields...)
		})
		in := logging.UnaryServerInterceptor(lg, logging.WithLogOnEvents(logging.FinishCall),
			logging.WithLevels(func(c codes.Code) logging.Level { return logging.Level(levelOf(c)) }))
		for b.Loop() {
			in(ctx, nil, info, handler)
		}
	})
}
