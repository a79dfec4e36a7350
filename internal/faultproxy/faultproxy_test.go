package faultproxy

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
	for _, m := range []Mode{Silent, SilentReplies} {
		t.Run(m.String(), func(t *testing.T) {
			p := Start(t, echoServer(t))
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

// TestSilenceFor: the connection open when the fault starts and the first
// one accepted after it stay silent for good; the proxy then heals by
// itself, and the next connection carries replies.
func TestSilenceFor(t *testing.T) {
	p := Start(t, echoServer(t))
	if p.Healed() != nil {
		t.Fatal("Healed before SilenceFor, want nil")
	}
	open, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := roundTrip(t, open, 5*time.Second); err != nil {
		t.Fatalf("before: %v", err)
	}
	p.SilenceFor(SilentReplies, 1)
	healed := p.Healed()
	redial, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer redial.Close()
	for name, c := range map[string]net.Conn{"open": open, "first redial": redial} {
		if err := roundTrip(t, c, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s connection: %v, want its replies lost", name, err)
		}
	}
	select {
	case <-healed:
	case <-time.After(5 * time.Second):
		t.Fatal("not healed after the counted connection was accepted")
	}
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := roundTrip(t, fresh, 5*time.Second); err != nil {
		t.Fatalf("after healing: %v", err)
	}
}
