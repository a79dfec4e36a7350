package testcluster

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections from a loopback port to a target. Made
// silent, it stops forwarding in both directions but keeps every socket
// open, as a blackholed peer would: no FIN, no RST, nothing at all.
type Proxy struct {
	Addr   string
	target string
	lis    net.Listener
	silent atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every copier
}

// StartProxy listens on a free loopback port and forwards to target until
// the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: lis.Addr().String(), target: target, lis: lis, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Silence stops forwarding; the sockets stay open.
func (p *Proxy) Silence() { p.silent.Store(true) }

// Heal forwards again. Connections that went silent are cut (what they
// carried is lost midway), so peers reconnect cleanly.
func (p *Proxy) Heal() {
	p.silent.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops listening and cuts every connection, and waits for its
// goroutines. Idempotent.
func (p *Proxy) Close() {
	p.lis.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Heal()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Go(func() { p.copy(out, in) })
		p.wg.Go(func() { p.copy(in, out) })
	}
}

// track registers a forwarded pair, unless the proxy is closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if p.closed {
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
	}
	return !p.closed
}

// copy forwards from src to dst, dropping what arrives while silent. It
// ends when either side closes, and then closes both.
func (p *Proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
