package cmdline

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// held is an address another listener holds for the test.
func held(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis.Addr().String()
}

func TestListenAllNamesEveryAddressInUse(t *testing.T) {
	a, b := held(t), held(t)
	free := &Addr{Flag: "admin", Addr: "127.0.0.1:0"}
	err := ListenAll(&Addr{Flag: "http", Addr: a}, free, &Addr{Flag: "listen", Addr: b}, &Addr{Flag: "bad", Addr: "nohost"}, &Addr{Flag: "unset"})
	if err == nil {
		t.Fatal("ListenAll succeeded on two addresses in use")
	}
	for _, want := range []string{"2 addresses are in use", a + " (--http)", b + " (--listen)", "--bad nohost: listen tcp"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %v is not EADDRINUSE", err)
	}
	if free.Lis != nil {
		t.Errorf("the free address is left open after the error")
	}
}

func TestListenAllFallsBackOnlyWhereAllowed(t *testing.T) {
	taken := held(t)
	fb := &Addr{Flag: "console-listen", Addr: taken, Fallback: true}
	if err := ListenAll(fb); err != nil {
		t.Fatal(err)
	}
	defer fb.Lis.Close()
	if !fb.FellBack || fb.Lis.Addr().String() == taken {
		t.Errorf("fell back %v, listening on %v; want a free port other than %s", fb.FellBack, fb.Lis.Addr(), taken)
	}
	strict := &Addr{Flag: "console-listen", Addr: taken}
	err := ListenAll(strict)
	if err == nil || err.Error() != taken+" is in use (another mcpcancel dev?): pass --console-listen HOST:PORT, or port 0 for a free one" {
		t.Errorf("ListenAll on a given address in use = %v", err)
	}
}
