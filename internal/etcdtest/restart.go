package etcdtest

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
)

// Restartable is a single member that a test stops and starts again, on
// the same data and the same addresses, to see what etcd's absence does.
type Restartable struct {
	t    testing.TB
	opts embedetcd.Options
	m    *embedetcd.Member
	cli  *clientv3.Client
}

// StartRestartable starts the member and a client to it; t's cleanup
// closes both.
func StartRestartable(t testing.TB) *Restartable {
	t.Helper()
	r := &Restartable{t: t, opts: embedetcd.Options{Dir: t.TempDir(), Fast: true, NoFsync: true}}
	r.Start()
	r.opts.ClientAddr, r.opts.PeerAddr = r.m.ClientURL(), r.m.PeerURL()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{r.m.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	r.cli = cli
	return r
}

// Client is the client to the member; it reconnects across restarts.
func (r *Restartable) Client() *clientv3.Client { return r.cli }

// Stop stops the member.
func (r *Restartable) Stop() { r.m.Close() }

// Start starts the member again (the first time, at all).
func (r *Restartable) Start() {
	r.t.Helper()
	m, err := embedetcd.Start(r.t.Context(), r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { m.Close() })
	r.m = m
}
