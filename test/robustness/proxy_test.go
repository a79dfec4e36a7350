package robustness

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes every line back until the test ends.
func echoServer(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { // ends when the connection does
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					c.Write(append(sc.Bytes(), '\n'))
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// roundTrip writes a line and waits up to d for its echo.
func roundTrip(t *testing.T, c net.Conn, d time.Duration) error {
	t.Helper()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(d))
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

// TestProxySilent: a silenced connection forwards nothing and is never
// closed, even after the proxy heals; a new one then works. Silencing only
// the replies lets requests through and loses what comes back.
func TestProxySilent(t *testing.T) {
	for _, m := range []proxyMode{modeSilent, modeSilentReplies} {
		t.Run(m.String(), func(t *testing.T) {
			p, err := NewProxy("test", echoServer(t))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			old, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if err := roundTrip(t, old, 5*time.Second); err != nil {
				t.Fatalf("before: %v", err)
			}
			p.Set(m, 0)
			if err := roundTrip(t, old, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("silenced: %v, want no answer and no close", err)
			}
			p.Heal()
			if err := roundTrip(t, old, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("healed, old connection: %v, want it still silent", err)
			}
			fresh, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			if err := roundTrip(t, fresh, 5*time.Second); err != nil {
				t.Fatalf("healed, new connection: %v", err)
			}
		})
	}
}
