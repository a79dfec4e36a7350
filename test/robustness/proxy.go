package robustness

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxyMode is what a Proxy does with traffic.
type proxyMode int

const (
	modePass      proxyMode = iota // forward everything
	modeDelay                      // forward every chunk after a delay
	modeBlackhole                  // accept, hold every byte until healed
	modeDrop                       // cut every connection, refuse new ones
	// modeSilent makes every connection open now, or opened until healed,
	// a silent peer: nothing is forwarded on it ever again, and it is
	// never closed; both ends must find out for themselves (keepalive).
	modeSilent
	// modeSilentReplies does it to one direction only: what the target
	// sends back (a reply after the request committed) is lost.
	modeSilentReplies
)

func (m proxyMode) String() string {
	return [...]string{"pass", "delay", "blackhole", "drop", "silent", "silent_replies"}[m]
}

// Proxy is a TCP proxy on loopback between two components, so a test can
// partition them without touching either process.
type Proxy struct {
	Name   string
	lis    net.Listener
	target string

	mu      sync.Mutex
	mode    proxyMode
	delay   time.Duration
	changed chan struct{} // closed and replaced on every mode change
	conns   map[net.Conn]struct{}
	pairs   map[*pair]struct{}
	wg      sync.WaitGroup
	closed  bool
}

// pair is one proxied connection; a silenced direction stays silent.
type pair struct {
	silentOut, silentBack atomic.Bool // toward the target, and back
}

// silenceLocked silences p as mode m says.
func (pr *pair) silenceLocked(m proxyMode) {
	switch m {
	case modeSilent:
		pr.silentOut.Store(true)
		pr.silentBack.Store(true)
	case modeSilentReplies:
		pr.silentBack.Store(true)
	}
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(name, target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Name: name, lis: lis, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}, pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Set changes the mode; modeDrop also cuts the open connections.
func (p *Proxy) Set(m proxyMode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, delay
	close(p.changed)
	p.changed = make(chan struct{})
	if m == modeDrop {
		for c := range p.conns {
			c.Close()
		}
	}
	for pr := range p.pairs {
		pr.silenceLocked(m)
	}
}

// Heal returns the proxy to forwarding.
func (p *Proxy) Heal() { p.Set(modePass, 0) }

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
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.mode == modeDrop {
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
	if p.closed || p.mode == modeDrop {
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
		case closed || mode == modeDrop:
			return false
		case mode == modeSilent || mode == modeSilentReplies:
			return true // the pair's own flags silence it
		case mode == modeBlackhole:
			<-changed
		case mode == modeDelay:
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
