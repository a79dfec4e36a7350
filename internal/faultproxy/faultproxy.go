// Package faultproxy is a TCP proxy on loopback that tests put between two
// components to inject network faults without touching either: delay,
// blackhole, drop, and silent peers (no FIN, no RST), in one direction or
// both. The unit tests, the in-process test cluster and the fault harness
// of separate processes all use it.
package faultproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Mode is what a Proxy does with traffic.
type Mode int

const (
	Pass      Mode = iota // forward everything
	Delay                 // forward every chunk after a delay
	Blackhole             // accept, hold every byte until healed
	Drop                  // cut every connection, refuse new ones
	// Silent makes every connection open now, or opened until healed, a
	// silent peer: nothing is forwarded on it ever again, and it is never
	// closed; both ends must find out for themselves (keepalive).
	Silent
	// SilentReplies does it to one direction only: what the target sends
	// back (a reply after the request committed) is lost.
	SilentReplies
)

func (m Mode) String() string {
	return [...]string{"pass", "delay", "blackhole", "drop", "silent", "silent_replies"}[m]
}

// Proxy is a TCP proxy on loopback between two components, so a test can
// partition them without touching either process.
type Proxy struct {
	Name   string
	lis    net.Listener
	target string

	mu        sync.Mutex
	mode      Mode
	delay     time.Duration
	changed   chan struct{} // closed and replaced on every mode change
	conns     map[net.Conn]struct{}
	pairs     map[*pair]struct{}
	healAfter int           // SilenceFor's accepts left before the mode returns to Pass; 0: never
	healed    chan struct{} // made by SilenceFor, closed when its count runs out
	wg        sync.WaitGroup
	closed    bool
}

// pair is one proxied connection; a silenced direction stays silent.
type pair struct {
	silentOut, silentBack atomic.Bool // toward the target, and back
}

// silenceLocked silences p as mode m says.
func (pr *pair) silenceLocked(m Mode) {
	switch m {
	case Silent:
		pr.silentOut.Store(true)
		pr.silentBack.Store(true)
	case SilentReplies:
		pr.silentBack.Store(true)
	}
}

// New listens on a free loopback port and forwards to target.
func New(name, target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Name: name, lis: lis, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}, pairs: map[*pair]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Start is New for a test: it fails the test if it cannot listen, and
// closes the proxy when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(t.Name(), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's listen address.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Set changes the mode; Drop also cuts the open connections.
func (p *Proxy) Set(m Mode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(m, delay)
}

// SilenceFor sets silent mode m (Silent or SilentReplies) for every
// connection open now and the next n accepted; the n-th accepted returns
// the proxy to Pass, so the one after it works. It models a peer that
// redials into the fault n times before the fault heals.
func (p *Proxy) SilenceFor(m Mode, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(m, 0)
	p.healAfter, p.healed = n, make(chan struct{})
}

// Healed is closed once the connections SilenceFor counted were accepted
// and the proxy forwards again; nil before SilenceFor.
func (p *Proxy) Healed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healed
}

// Reset returns the proxy to Pass and closes every connection open now,
// silent ones included, so that both ends see them end and reconnect
// cleanly.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(Pass, 0)
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) setLocked(m Mode, delay time.Duration) {
	p.mode, p.delay, p.healAfter = m, delay, 0
	close(p.changed)
	p.changed = make(chan struct{})
	if m == Drop {
		for c := range p.conns {
			c.Close()
		}
	}
	for pr := range p.pairs {
		pr.silenceLocked(m)
	}
}

// Heal returns the proxy to forwarding.
func (p *Proxy) Heal() { p.Set(Pass, 0) }

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.lis.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.mode == Drop {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(up) {
		up.Close()
		c.Close()
		return
	}
	defer p.forget(up)
	pr := &pair{}
	p.mu.Lock()
	pr.silenceLocked(p.mode)
	if p.healAfter > 0 {
		if p.healAfter--; p.healAfter == 0 {
			p.setLocked(Pass, 0)
			close(p.healed)
		}
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	defer func() { p.mu.Lock(); delete(p.pairs, pr); p.mu.Unlock() }()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(up, c, &pr.silentOut) }()
	go func() { defer wg.Done(); p.pipe(c, up, &pr.silentBack) }()
	wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Drop {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forget(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst, honouring the mode before every chunk; either
// side failing closes both. Once silent, it only reads and drops what src
// sends, closing nothing, until src ends: no FIN or RST reaches dst.
func (p *Proxy) pipe(dst, src net.Conn, silent *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if silent.Load() {
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if !p.gate() {
				dst.Close()
				src.Close()
				return
			}
			if silent.Load() {
				continue // silenced while it waited
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				dst.Close()
				src.Close()
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && err == io.EOF {
				tc.CloseWrite()
			}
			dst.Close()
			src.Close()
			return
		}
	}
}

// gate waits while the proxy blackholes, applies any delay, and says
// whether to forward at all.
func (p *Proxy) gate() bool {
	for {
		p.mu.Lock()
		mode, delay, changed, closed := p.mode, p.delay, p.changed, p.closed
		p.mu.Unlock()
		switch {
		case closed || mode == Drop:
			return false
		case mode == Silent || mode == SilentReplies:
			return true // the pair's own flags silence it
		case mode == Blackhole:
			<-changed
		case mode == Delay:
			t := time.NewTimer(delay) // a modelled network delay, not synchronisation
			select {
			case <-t.C:
				return true
			case <-changed:
				t.Stop()
			}
		default:
			return true
		}
	}
}
