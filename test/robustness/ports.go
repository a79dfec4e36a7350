package robustness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// restartableAddrs reserves n loopback addresses for processes that are
// killed and restarted on the same port. They are taken below the
// kernel's ephemeral range: a port from that range (what ":0" hands out)
// can be taken, while its process is down, as the local port of some
// outgoing connection, and the restart then fails with "address already
// in use".
func restartableAddrs(n int) ([]string, error) {
	lo := ephemeralLow()
	const from = 10000
	if lo <= from+n {
		return nil, fmt.Errorf("the ephemeral port range starts at %d; no room below it", lo)
	}
	var addrs []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no %d free ports below %d", n, lo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", from+rand.IntN(lo-from)))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	lo := 32768 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
			lo = 32768
		}
	}
	return lo
}
