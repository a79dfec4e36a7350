// Package dial opens gRPC client connections to coordinator replicas: one
// target ("host:port", "dns:///name:port") or a comma-separated list of
// addresses, balanced round-robin so a dead replica is skipped.
package dial

import (
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// ErrNoTarget means the target was empty.
var ErrNoTarget = errors.New("dial: no coordinator address given")

const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// New connects lazily to target. Without transport credentials among opts
// it dials in plaintext.
func New(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	target = strings.TrimSpace(target)
	if target == "" {
		return nil, ErrNoTarget
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(roundRobin),
	}, opts...)
	if !strings.Contains(target, ",") {
		return grpc.NewClient(target, opts...)
	}
	var addrs []resolver.Address
	for _, a := range strings.Split(target, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, resolver.Address{Addr: a})
		}
	}
	r := manual.NewBuilderWithScheme("mcpcancel")
	r.InitialState(resolver.State{Addresses: addrs})
	return grpc.NewClient(r.Scheme()+":///coordinators", append(opts, grpc.WithResolvers(r))...)
}
