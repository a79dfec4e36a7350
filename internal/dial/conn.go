package dial

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// Conn is a client connection its user may replace with a fresh one when
// it finds the current one half-dead. A peer whose replies are lost, while
// what is sent to it still arrives, keeps a transport "ready" until
// keepalive gives up on it (Time plus Timeout, 15 s by default), and every
// RPC on it waits as long; a fresh connection has new sockets. Conn is a
// grpc.ClientConnInterface, so generated clients take it. It is safe for
// concurrent use.
type Conn struct {
	target string
	opts   []grpc.DialOption

	mu       sync.Mutex
	cc       *grpc.ClientConn
	gen      uint64 // numbers cc; one more with each redial
	closed   bool
	done     chan struct{}  // closed by Close
	retiring sync.WaitGroup // replaced connections in their grace (RedialAfter)
}

var _ grpc.ClientConnInterface = (*Conn)(nil)

// ErrClosed means the Conn was closed.
var ErrClosed = errors.New("dial: connection closed")

// Open connects lazily to target as New does, behind a Conn.
func Open(target string, opts ...grpc.DialOption) (*Conn, error) {
	cc, err := New(target, opts...)
	if err != nil {
		return nil, err
	}
	return &Conn{target: target, opts: opts, cc: cc, gen: 1, done: make(chan struct{})}, nil
}

func (c *Conn) current() *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cc
}

// Invoke implements grpc.ClientConnInterface on the current connection.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.current().Invoke(ctx, method, args, reply, opts...)
}

// NewStream implements grpc.ClientConnInterface on the current connection.
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.current().NewStream(ctx, desc, method, opts...)
}

// Gen numbers the current connection. A caller that may find the link
// dead reads it before its RPC and passes it to Redial.
func (c *Conn) Gen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Redial replaces connection gen with a fresh one, if gen is still the
// current one, and closes it: what still rides it fails with
// codes.Canceled, and streams on it end. It reports whether it replaced
// the connection; many callers that found the same connection dead
// replace it once.
func (c *Conn) Redial(gen uint64) (bool, error) { return c.RedialAfter(gen, 0) }

// RedialAfter is Redial, but the replaced connection is closed only once
// grace has passed (or the Conn is closed): new RPCs go to the fresh one
// at once, and those already riding the old one have grace to finish. A
// link is found half-dead by one attempt that went unanswered, often
// only slow; the others on it may be answered, and closing it at once
// would fail them all.
func (c *Conn) RedialAfter(gen uint64, grace time.Duration) (bool, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false, ErrClosed
	}
	if gen != c.gen {
		c.mu.Unlock()
		return false, nil
	}
	cc, err := New(c.target, c.opts...)
	if err != nil {
		c.mu.Unlock()
		return false, err
	}
	cc.Connect() // at once, not on its first RPC: the next one finds it ready
	old := c.cc
	c.cc, c.gen = cc, c.gen+1
	if grace <= 0 {
		c.mu.Unlock()
		old.Close() // outside mu: it waits for the old transports to go
		return true, nil
	}
	c.retiring.Add(1)
	c.mu.Unlock()
	go c.retire(old, grace) // owned: Close waits for it
	return true, nil
}

// retire closes a replaced connection after grace, or at once when the
// Conn is closed.
func (c *Conn) retire(old *grpc.ClientConn, grace time.Duration) {
	defer c.retiring.Done()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.done:
	}
	old.Close()
}

// Close closes the current connection, and any replaced one still in its
// grace. Idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	err := c.cc.Close()
	c.mu.Unlock()
	c.retiring.Wait()
	return err
}
