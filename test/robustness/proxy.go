package robustness

import "github.com/mcpcancel/mcpcancel/internal/faultproxy"

// Proxy is the TCP proxy between two components of the cluster.
type Proxy = faultproxy.Proxy

// proxyMode is what a Proxy does with traffic.
type proxyMode = faultproxy.Mode

// The proxy modes the faults use.
const (
	modeDelay         = faultproxy.Delay
	modeBlackhole     = faultproxy.Blackhole
	modeDrop          = faultproxy.Drop
	modeSilent        = faultproxy.Silent
	modeSilentReplies = faultproxy.SilentReplies
)

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(name, target string) (*Proxy, error) { return faultproxy.New(name, target) }
