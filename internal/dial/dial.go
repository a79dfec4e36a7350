// Package dial opens gRPC client connections to coordinator replicas: one
// target ("host:port", "dns:///name:port") or a comma-separated list of
// addresses, balanced round-robin so a dead replica is skipped. Every
// connection it opens pings its peer (gRPC keepalive), so a silent
// replica is noticed without TCP's help.
package dial

import (
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// ErrNoTarget means the target was empty.
var ErrNoTarget = errors.New("dial: no coordinator address given")

const roundRobin = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// Keepalive says how a client notices a silent server. The zero value of
// each field means its default.
type Keepalive struct {
	// Time is how long a connection may be idle before the client pings
	// (default 10s, which is also the least gRPC clients allow).
	Time time.Duration
	// Timeout is how long the client waits for the ping's answer before it
	// closes the connection and fails its streams (default 5s).
	Timeout time.Duration
}

// setDefaults fills in the default of every zero (or negative) field.
func (k *Keepalive) setDefaults() {
	if k.Time <= 0 {
		k.Time = 10 * time.Second
	}
	if k.Timeout <= 0 {
		k.Timeout = 5 * time.Second
	}
}

// Option is the dial option of k. It pings even with no stream open, which
// the servers of grpcserver permit.
func (k Keepalive) Option() grpc.DialOption {
	k.setDefaults()
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: k.Time, Timeout: k.Timeout, PermitWithoutStream: true})
}

// New connects lazily to target, with the default Keepalive unless opts
// set another. Without transport credentials among opts it dials in
// plaintext.
func New(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	target = strings.TrimSpace(target)
	if target == "" {
		return nil, ErrNoTarget
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(roundRobin),
		Keepalive{}.Option(),
		telemetry.DialOption(), // a span per RPC, when the process traces
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
