package cli

import (
	"context"

	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// attachedHealth makes the worker's grpc.health.v1 Check answer
// NOT_SERVING until the worker has first attached to a coordinator, so a
// worker pod turns ready (and a rollout moves on) only once it can be given
// calls. A draining worker turns NOT_SERVING on its own. attached is called
// at each check, as the worker is made after its options.
func attachedHealth(attached func() <-chan struct{}) grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if info.FullMethod == healthgrpc.Health_Check_FullMethodName {
			select {
			case <-attached():
			default:
				return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
			}
		}
		return next(ctx, req)
	})
}
