package clientcmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/console"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutConsole = `Serves the web console for a coordinator: the calls in flight (live), the
decision feed, audit search, the workers, each call's timeline, and an
operator cancel on each running call.

On a loopback --listen address (the default) it serves plain HTTP to
loopback clients only. On any other address it needs --tls-cert, --tls-key
and --tls-ca: it then serves HTTPS with that certificate and admits only
browsers presenting a certificate from that CA with role admin (to look)
or operator (to cancel too); the audit names the browser's certificate.
The same certificate dials the coordinator, so its role must be operator
for cancels to work.`

// DefaultConsoleListen is where the console serves unless told otherwise;
// dev, left to this default, takes a free port when it is in use.
const DefaultConsoleListen = "127.0.0.1:7802"

func RunConsole(ctx context.Context, s cmdline.Streams, args []string) error {
	var coord, listen string
	var files tlsconfig.Files
	f := cmdline.NewFlags(s, "console", aboutConsole)
	f.StringVar(&coord, "coordinator", "127.0.0.1:7801", "coordinator `address`: HOST:PORT, dns:///NAME:PORT, or a comma-separated list")
	f.StringVar(&listen, "listen", DefaultConsoleListen, "`HOST:PORT` to serve the console on (port 0 picks a free one)")
	f.TLS(&files)
	level := f.LogLevel()
	if err := f.Parse(args); err != nil {
		return err
	}
	sec, err := cmdline.LoadTLS(files, nil)
	if err != nil {
		return err
	}
	conn, err := dialCoordinator(coord, files)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer conn.Close()
	lis, err := cmdline.ListenFlag("listen", listen)
	if err != nil {
		return err
	}
	opts := consoleOptions(conn, cmdline.NewLogger(s.Stderr, *level))
	var tlsCfg *tls.Config
	if !isLoopbackListener(lis) {
		if sec.Source() == nil {
			lis.Close()
			return cmdline.Usage(fmt.Errorf("--listen %s is not loopback: give --tls-cert, --tls-key and --tls-ca so that only admins and operators get in", listen))
		}
		tlsCfg, opts.Access = consoleTLS(sec.Source()), console.CertAccess
	}
	printConsole(s.Stderr, lis, tlsCfg)
	return serveConsole(ctx, lis, console.New(opts), tlsCfg)
}

func consoleOptions(conn grpc.ClientConnInterface, log *slog.Logger) console.Options {
	return console.Options{
		Coordinator: pb.NewCoordinatorServiceClient(conn),
		Admin:       pb.NewAdminServiceClient(conn),
		Logger:      log,
	}
}

// consoleTLS serves HTTPS with the process's certificate and requires
// browsers to present one from the same CA.
func consoleTLS(src *tlsconfig.Source) *tls.Config {
	base := src.ServerConfig()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := base.GetConfigForClient(hello)
			if err != nil {
				return nil, err
			}
			c = c.Clone()
			c.NextProtos = []string{"h2", "http/1.1"}
			return c, nil
		},
	}
}

// printConsole prints the console's line: "console: URL".
func printConsole(stderr io.Writer, lis net.Listener, tlsCfg *tls.Config) {
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	fmt.Fprintf(stderr, "console: %s://%s/\n", scheme, lis.Addr())
}

// serveConsole serves c on lis until ctx is done.
func serveConsole(ctx context.Context, lis net.Listener, c *console.Console, tlsCfg *tls.Config) error {
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsCfg}
	errc := make(chan error, 1)
	go func() { // ends with Shutdown below
		if tlsCfg != nil {
			errc <- srv.ServeTLS(lis, "", "")
			return
		}
		errc <- srv.Serve(lis)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	srv.Shutdown(sctx) // live event streams end at the deadline
	srv.Close()
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// StartDevConsole serves the console of dev's coordinator on lis (dev's
// --console-listen, bound with its other addresses) until ctx is done or
// the returned func, which waits for it, stops it. lis must be loopback.
func StartDevConsole(ctx context.Context, stderr io.Writer, conn grpc.ClientConnInterface, lis net.Listener, log *slog.Logger) (func(), error) {
	if !isLoopbackListener(lis) {
		lis.Close()
		return nil, cmdline.Usage(fmt.Errorf("--console-listen %s: dev serves its console on loopback only; run 'mcpcancel console' with certificates to expose it", lis.Addr()))
	}
	printConsole(stderr, lis, nil)
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned: the returned func waits for it
		defer close(done)
		if err := serveConsole(ctx, lis, console.New(consoleOptions(conn, log)), nil); err != nil {
			log.Error("console stopped", "err", err)
		}
	}()
	return func() { stop(); <-done }, nil
}

func isLoopbackListener(lis net.Listener) bool {
	a, ok := lis.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
