package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/version"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveAdmin serves /metrics for reg and the mcpcancel_build_info gauge,
// /healthz, /version (internal/version's Info as JSON), and the Go
// profiles at /debug/pprof/ (the benchmark reads heaps there), on lis
// (--admin, bound with the process's other addresses) until ctx is done.
// A nil lis serves nothing. It prints "admin: HOST:PORT".
func serveAdmin(ctx context.Context, stderr io.Writer, lis net.Listener, reg *prometheus.Registry) error {
	return serveAdminReady(ctx, stderr, lis, reg, nil)
}

// serveAdminReady is serveAdmin with /readyz answering as ready says:
// 200 when it returns nil, else 503 with the reason. A nil ready serves
// no /readyz.
func serveAdminReady(ctx context.Context, stderr io.Writer, lis net.Listener, reg *prometheus.Registry, ready func(context.Context) error) error {
	if lis == nil {
		return nil
	}
	fmt.Fprintf(stderr, "admin: %s\n", lis.Addr())
	mux := http.NewServeMux()
	info := version.Get()
	build := prometheus.NewRegistry()
	build.MustRegister(info.Collector())
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, build}, promhttp.HandlerOpts{}))
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(info)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	if ready != nil {
		mux.HandleFunc("/readyz", readyz(ready))
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }() // ends with Shutdown below
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// readyz answers a readiness probe by ready, within a second.
func readyz(ready func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	}
}

// grpcHealth is a readiness check that follows this process's own gRPC
// health service (grpc.health.v1, service ""), dialled on loopback with
// opts: the process's own certificate under mTLS, which kubelet's gRPC
// probes cannot present. The connection is made on the first check and
// closed by the returned func.
func grpcHealth(listen string, opts []grpc.DialOption) (func(context.Context) error, func()) {
	var (
		mu   sync.Mutex
		conn *grpc.ClientConn
	)
	check := func(ctx context.Context) error {
		mu.Lock()
		if conn == nil {
			c, err := dial.New(loopbackTarget(listen), opts...)
			if err != nil {
				mu.Unlock()
				return err
			}
			conn = c
		}
		c := conn
		mu.Unlock()
		resp, err := healthgrpc.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return fmt.Errorf("gRPC health check: %s", status.Convert(err).Message())
		}
		if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("gRPC health is %s", st)
		}
		return nil
	}
	closeConn := func() {
		mu.Lock()
		defer mu.Unlock()
		if conn != nil {
			conn.Close()
		}
	}
	return check, closeConn
}

// loopbackTarget is where this process reaches its own listener: an
// unspecified host (":7900", "0.0.0.0:7900") becomes 127.0.0.1.
func loopbackTarget(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
