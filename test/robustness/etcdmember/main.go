// Command etcdmember runs one member of an etcd cluster as its own process,
// so the robustness tests can SIGKILL, SIGSTOP and restart it like any
// other component. It prints "ready" on stderr once it serves clients and
// stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("etcdmember", flag.ContinueOnError)
	name := fs.String("name", "m0", "member `name`")
	dir := fs.String("dir", "", "data `DIR` (required)")
	client := fs.String("client", "", "client `HOST:PORT`")
	peer := fs.String("peer", "", "peer `HOST:PORT`")
	initial := fs.String("initial-cluster", "", "`name=http://HOST:PORT,...`")
	tick := fs.Uint("tick-ms", 25, "heartbeat `ms`")
	election := fs.Uint("election-ms", 400, "election timeout `ms`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || *client == "" || *peer == "" {
		fmt.Fprintln(os.Stderr, "etcdmember: --dir, --client and --peer are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := embedetcd.Start(ctx, embedetcd.Options{
		Dir: *dir, Name: *name, ClientAddr: *client, PeerAddr: *peer,
		InitialCluster: *initial, TickMs: *tick, ElectionMs: *election, NoFsync: true,
		// A member restarted late in a soak replays a long log and catches
		// up while the machine is busy: 30 s was seen not to be enough.
		ReadyTimeout: 2 * time.Minute,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdmember:", err)
		return 1
	}
	defer m.Close()
	fmt.Fprintln(os.Stderr, "ready")
	select {
	case <-ctx.Done():
	case err := <-m.Etcd.Err():
		fmt.Fprintln(os.Stderr, "etcdmember:", err)
		return 1
	}
	return 0
}
