package grpcserver

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Only RPCs that fail are logged, at their code's level, with the method,
// the code and the error; one that ends well writes nothing at Info.
func TestCallLog(t *testing.T) {
	var buf bytes.Buffer
	l := callLog{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	info := &grpc.UnaryServerInfo{FullMethod: "/mcpcancel.v1.CoordinatorService/Begin"}
	for _, tc := range []struct {
		err  error
		want string // "" for no line
	}{
		{nil, ""},
		{status.Error(codes.NotFound, "no such call"), ""},
		{status.Error(codes.Unavailable, "etcd is away"), "level=WARN msg=\"finished call\" grpc.method=/mcpcancel.v1.CoordinatorService/Begin grpc.method_type=unary grpc.code=Unavailable"},
		{errors.New("boom"), "level=ERROR msg=\"finished call\" grpc.method=/mcpcancel.v1.CoordinatorService/Begin grpc.method_type=unary grpc.code=Unknown"},
	} {
		buf.Reset()
		_, err := l.unary(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, tc.err })
		if err != tc.err {
			t.Fatalf("the interceptor returned %v, want the handler's %v", err, tc.err)
		}
		got := buf.String()
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%v: logged %q, want nothing", tc.err, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%v: logged %q, want it to contain %q", tc.err, got, tc.want)
		case tc.want != "" && !strings.Contains(got, "grpc.error="):
			t.Errorf("%v: logged %q, want the error", tc.err, got)
		}
	}
}
