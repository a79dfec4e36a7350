// Package embedetcd starts etcd members inside this process: one member for
// `mcpcancel dev` and tests, or several forming a cluster for fault tests.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrNotReady means a member did not become ready in time.
var ErrNotReady = errors.New("embedetcd: member not ready")

// Options configures one member. The zero value is a single member on
// loopback with ports picked by the kernel and fsync on.
type Options struct {
	// Dir holds the member's data. Required.
	Dir string
	// Name is the member's name (default "default").
	Name string
	// ClientAddr and PeerAddr are host:port to listen on; empty picks a
	// free loopback port.
	ClientAddr, PeerAddr string
	// InitialCluster is "name=peerURL,..." for a multi-member cluster; empty
	// means a cluster of this member alone.
	InitialCluster string
	// Fast shortens heartbeats and elections (10 ms / 50 ms) so tests are
	// quick; production timings otherwise.
	Fast bool
	// TickMs and ElectionMs, when set, override the heartbeat and election
	// timings.
	TickMs, ElectionMs uint
	// NoFsync skips fsync. Only for tests whose subject is not durability.
	NoFsync bool
	// Logger for etcd itself; nil silences it.
	Logger *zap.Logger
	// ReadyTimeout bounds the wait for the member to serve (default 30s).
	ReadyTimeout time.Duration
	// CompactionRetention is how much history the member keeps: it
	// compacts the revisions older than this, periodically (default 1h;
	// negative keeps everything). Every call writes revisions, so without
	// compaction the database grows until etcd refuses writes.
	CompactionRetention time.Duration
}

// DefaultCompactionRetention is the history a member keeps by default.
const DefaultCompactionRetention = time.Hour

// Member is a running etcd member.
type Member struct {
	Etcd      *embed.Etcd
	name      string
	clientURL string
	peerURL   string
	closeOnce sync.Once
}

// pickTries bounds how often Start picks fresh ports for a member whose
// picked port was taken between the pick and etcd's bind.
const pickTries = 5

// Start starts a member and waits until it serves clients. A port it
// picked that another process took before etcd could bind it is picked
// again.
func Start(ctx context.Context, opts Options) (*Member, error) {
	for try := 1; ; try++ {
		m, err := start(ctx, opts)
		if !AddrInUse(err) || opts.ClientAddr != "" && opts.PeerAddr != "" || try == pickTries {
			return m, err
		}
	}
}

// AddrInUse says whether err is a listener finding its address taken:
// with picked ports, a race lost to another process, worth a new pick.
func AddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

func start(ctx context.Context, opts Options) (*Member, error) {
	cfg, m, err := config(opts)
	if err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start %s: %w", m.name, err)
	}
	m.Etcd = e
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
		return m, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedetcd: %s: %w", m.name, err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("%w: %s after %v", ErrNotReady, m.name, timeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
}

func config(opts Options) (*embed.Config, *Member, error) {
	cfg := embed.NewConfig()
	cfg.Dir = opts.Dir
	if opts.Name != "" {
		cfg.Name = opts.Name
	}
	m := &Member{name: cfg.Name}
	var err error
	if m.clientURL, err = loopbackURL(opts.ClientAddr); err != nil {
		return nil, nil, err
	}
	if m.peerURL, err = loopbackURL(opts.PeerAddr); err != nil {
		return nil, nil, err
	}
	cu, _ := url.Parse(m.clientURL)
	pu, _ := url.Parse(m.peerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = opts.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.Name + "=" + m.peerURL
	}
	if opts.Fast {
		cfg.TickMs, cfg.ElectionMs = 10, 50
	}
	if opts.TickMs > 0 {
		cfg.TickMs, cfg.ElectionMs = opts.TickMs, opts.ElectionMs
	}
	cfg.UnsafeNoFsync = opts.NoFsync
	switch r := opts.CompactionRetention; {
	case r == 0:
		r = DefaultCompactionRetention
		fallthrough
	case r > 0:
		cfg.AutoCompactionMode = embed.CompactorModePeriodic
		cfg.AutoCompactionRetention = r.String()
	}
	lg := opts.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	return cfg, m, nil
}

// ClientURL is the member's client URL (http://127.0.0.1:PORT).
func (m *Member) ClientURL() string { return m.clientURL }

// PeerURL is the member's peer URL.
func (m *Member) PeerURL() string { return m.peerURL }

// Name is the member's name.
func (m *Member) Name() string { return m.name }

// Close stops the member and waits for it to stop. It is idempotent.
func (m *Member) Close() { m.closeOnce.Do(m.Etcd.Close) }

// FreeAddrs reserves n distinct free loopback TCP addresses. The ports are
// released before return, so another process could take one before etcd
// binds it: Start picks again when it picked, and a caller that passes
// the addresses retries on AddrInUse.
func FreeAddrs(n int) ([]string, error) {
	var addrs []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("embedetcd: reserve port: %w", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

func loopbackURL(addr string) (string, error) {
	if addr == "" {
		a, err := FreeAddrs(1)
		if err != nil {
			return "", err
		}
		addr = a[0]
	}
	if strings.Contains(addr, "://") {
		return addr, nil
	}
	return "http://" + addr, nil
}
