package upstream_test

import (
	"context"
	"log"
	"net"

	"golang.org/x/sync/errgroup"

	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// A worker fronting an MCP server that runs as a child process: the
// adapter offers the server's tools and restarts it if it dies; the worker
// serves the calls. Stop the worker first so running calls can finish,
// then the adapter.
func Example() {
	w := worker.New(worker.Options{Coordinator: "127.0.0.1:7801"})
	a := upstream.New(w, upstream.Options{Command: []string{"npx", "@modelcontextprotocol/server-everything", "stdio"}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background() // cancel it to shut down
	adapterCtx, stopAdapter := context.WithCancel(context.WithoutCancel(ctx))
	var g errgroup.Group
	g.Go(func() error { return a.Run(adapterCtx) })
	g.Go(func() error { defer stopAdapter(); return w.Run(ctx, lis) })
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
}

// A worker fronting two MCP servers at once: each has its own adapter,
// sessions and policy, and their tools are offered as files_read_file,
// search_query and so on. Stop the worker first, then the group.
func ExampleGroup() {
	w := worker.New(worker.Options{Coordinator: "127.0.0.1:7801"})
	servers := upstream.NewGroup(w, nil)
	if _, err := servers.Add("files", upstream.Options{Command: []string{"npx", "@modelcontextprotocol/server-filesystem", "/srv/files"}}); err != nil {
		log.Fatal(err)
	}
	if _, err := servers.Add("search", upstream.Options{URL: "http://search.internal:8000/mcp", Sessions: upstream.Shared,
		Config: &upstream.Config{Allow: []string{"query"}}}); err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background() // cancel it to shut down
	groupCtx, stopGroup := context.WithCancel(context.WithoutCancel(ctx))
	var g errgroup.Group
	g.Go(func() error { return servers.Run(groupCtx) })
	g.Go(func() error { defer stopGroup(); return w.Run(ctx, lis) })
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
}
