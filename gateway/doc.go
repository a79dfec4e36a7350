// Package gateway is the MCP side of mcpcancel: it speaks MCP to clients
// over stdio and Streamable HTTP (the 2025 revisions, with sessions, and
// the stateless 2026-07-28 revision), runs their calls on workers, and
// turns every MCP cancellation into a coordinator decision.
//
// The rule it keeps: every request the gateway routes passes through a
// gate that lets exactly one of its response or its cancellation out, and
// progress only before either. Once a client's own cancellation wins,
// nothing of that request goes out; a request cancelled by anyone else is
// answered with an error. No line of a connection waits for another, and
// no network write happens under a lock.
//
//	conn, err := grpc.NewClient(coordinatorAddr, creds) // the coordinators
//	g := gateway.New(gateway.Options{Coordinator: conn})
//	defer g.Close()
//	go g.Run(ctx)                      // follows the tool list until ctx ends
//	err = g.ServeHTTP(ctx, lis, grace) // Streamable HTTP on lis
//	// or one client over stdio:
//	err = g.ServeStdio(ctx, os.Stdin, os.Stdout)
//
// It talks to the coordinator only through the generated API and
// api/client: neither the coordinator package nor etcd is among its
// dependencies.
package gateway
