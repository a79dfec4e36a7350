package robustness

import (
	"io"
	"net"
	"sync"
	"time"
)

// proxyMode is what a Proxy does with traffic.
type proxyMode int

const (
	modePass      proxyMode = iota // forward everything
	modeDelay                      // forward every chunk after a delay
	modeBlackhole                  // accept, hold every byte until healed
	modeDrop                       // cut every connection, refuse new ones
)

func (m proxyMode) String() string {
	return [...]string{"pass", "delay", "blackhole", "drop"}[m]
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
	wg      sync.WaitGroup
	closed  bool
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(name, target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Name: name, lis: lis, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
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
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(up, c) }()
	go func() { defer wg.Done(); p.pipe(c, up) }()
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
// side failing closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
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
