package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Mux serves the MCP endpoint at /mcp, and /healthz and /readyz.
func (g *Gateway) Mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/mcp", g.Handler())
	mux.HandleFunc("/sse", notServed2024)
	mux.HandleFunc("/messages", notServed2024)
	g.registerMetadata(mux)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", g.ready)
	mux.Handle("/metrics", g.metricsHandler())
	return mux
}

// ready answers 200 only while calls can be decided now: a coordinator
// says it is SERVING (it reaches etcd, its watches are open).
func (g *Gateway) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := g.canDecide(ctx); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}

func (g *Gateway) canDecide(ctx context.Context) error {
	resp, err := g.health.Check(ctx, &healthpb.HealthCheckRequest{Service: pb.CoordinatorService_ServiceDesc.ServiceName})
	switch {
	case err != nil:
		return errors.New("the coordinator is unavailable")
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return errors.New("the coordinator cannot decide calls now (it cannot reach etcd)")
	}
	return nil
}

// ServeHTTP serves Mux on lis until ctx is done, then stops accepting,
// lets calls in flight finish for up to grace, cancels the rest (reason
// "shutdown", unanswered) and returns.
func (g *Gateway) ServeHTTP(ctx context.Context, lis net.Listener, grace time.Duration) error {
	srv := &http.Server{Handler: g.Mux(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }() // ends with Shutdown/Close below
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return g.drain(srv, errc, grace)
}

func (g *Gateway) drain(srv *http.Server, errc chan error, grace time.Duration) error {
	srv.SetKeepAlivesEnabled(false)
	lis := make(chan struct{})
	go func() { // owned: waited on below; stops the listener while calls drain
		srv.Shutdown(context.Background())
		close(lis)
	}()
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	g.waitCalls(graceCtx)
	g.Close()
	srv.Close() // ends streams still open (GET streams, cancelled calls)
	<-lis
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// waitCalls waits until no call is in flight or ctx is done, and then
// cancels what is left.
func (g *Gateway) waitCalls(ctx context.Context) {
	if g.waitNoCalls(ctx) != nil {
		g.Close()
	}
}

// notServed2024 answers the endpoints of the 2024-11-05 HTTP+SSE
// transport, which the gateway does not serve, with what to use instead,
// so that an old client's user reads why rather than a bare 404.
func notServed2024(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "mcpcancel serves MCP over Streamable HTTP at /mcp (revisions 2025-03-26 and later); "+
		"the 2024-11-05 HTTP+SSE transport (/sse, /messages) is not served", http.StatusNotFound)
}
