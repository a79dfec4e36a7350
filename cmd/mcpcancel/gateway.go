package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/gateway/auth"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/dial"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
)

const aboutGateway = `Runs a gateway: it speaks MCP to clients (Streamable HTTP at /mcp, or
stdio), runs their tool calls on the workers a coordinator assigns, and turns
every cancellation into a coordinator decision. Serves /healthz and /readyz
beside /mcp. On SIGINT or SIGTERM it stops accepting, lets calls finish for
--shutdown-grace, then cancels the rest (reason "shutdown").`

type gatewayFlags struct {
	http, coordinator, name, origins       string
	tokensFile                             string
	jwksFile, jwtIssuer, jwtAudience       string
	oauth                                  oauthFlags
	tls                                    tlsconfig.Files // gateway only: dev ignores it
	admin                                  string          // /metrics and /debug/pprof/ beside MCP
	stdio                                  bool
	callTimeout, grace, ping, writeTimeout time.Duration
	scopeLimit, globalLimit                int
	logLevel                               *slog.Level
	stateKeyFile                           string // statekey.go
	stateKey                               []byte
}

func (o *gatewayFlags) register(f *cmdline.Flags, withCoordinator bool) {
	f.StringVar(&o.http, "http", "127.0.0.1:7800", "`HOST:PORT` to serve MCP Streamable HTTP on (at /mcp)")
	f.BoolVar(&o.stdio, "stdio", false, "speak MCP on stdin/stdout instead of HTTP (logs go to stderr)")
	if withCoordinator {
		f.StringVar(&o.coordinator, "coordinator", "127.0.0.1:7801", "coordinator `address`: HOST:PORT, dns:///NAME:PORT, or a comma-separated list")
	}
	f.StringVar(&o.name, "name", "", "this gateway replica's `name` in call records (default: generated)")
	f.StringVar(&o.tokensFile, "tokens-file", "", "`file` of bearer tokens, one \"TOKEN PRINCIPAL\" per line, reread when it changes; empty: no authentication (every client is \"anonymous\")")
	f.StringVar(&o.jwksFile, "jwks-file", "", "JWKS `file` of the keys (HMAC, RSA, EC, Ed25519) that sign JWT bearer tokens, reread when it changes; needs --jwt-issuer; the principal is \"jwt:ISSUER:SUBJECT\"")
	f.StringVar(&o.jwtIssuer, "jwt-issuer", "", "the `issuer` (\"iss\") every JWT must name; without --jwks-file its keys come from --jwks-url or the issuer's metadata")
	f.StringVar(&o.jwtAudience, "jwt-audience", "", "the `audience` (\"aud\") every JWT must include (default: --public-url)")
	o.oauth.register(f)
	f.StringVar(&o.origins, "allowed-origins", "", "comma-separated `origins` browsers may call from, besides loopback (DNS-rebinding protection)")
	f.DurationVar(&o.callTimeout, "call-timeout", 10*time.Minute, "longest a tool call may run before it is cancelled (reason \"timeout\")")
	f.DurationVar(&o.writeTimeout, "write-timeout", 10*time.Second, "longest a write to a client may take; a client that does not read in time is cut off and its calls cancelled (reason \"disconnect\")")
	f.DurationVar(&o.grace, "shutdown-grace", 30*time.Second, "how long shutdown lets calls in flight finish before cancelling them")
	f.DurationVar(&o.ping, "ping-interval", 0, "ping clients that can hear the gateway this often; 0 never")
	f.IntVar(&o.scopeLimit, "scope-limit", 256, "most calls in flight per session or connection")
	f.IntVar(&o.globalLimit, "global-limit", 10000, "most calls in flight on this gateway")
	f.StringVar(&o.admin, "admin", "", "`HOST:PORT` to serve /metrics and /debug/pprof/ on (also with --stdio); empty serves none")
	f.StringVar(&o.stateKeyFile, "state-key-file", "", "`file` holding the key (64 hex digits) that seals 2026-07-28 requestState; replicas serving the same clients share it; empty: a key of this process's own")
	o.logLevel = f.LogLevel()
}

func (o *gatewayFlags) check() error {
	switch {
	case o.callTimeout <= 0 || o.grace <= 0 || o.writeTimeout <= 0:
		return cmdline.Usage(errors.New("--call-timeout, --shutdown-grace and --write-timeout must be positive"))
	case o.scopeLimit <= 0 || o.globalLimit <= 0:
		return cmdline.Usage(errors.New("--scope-limit and --global-limit must be positive"))
	}
	if err := o.loadStateKey(); err != nil {
		return err
	}
	return o.oauth.check(o)
}

// authenticator returns the configured authenticator, or nil (warning
// loudly when the gateway listens beyond loopback without one).
func (o *gatewayFlags) authenticator(log *slog.Logger) (auth.Authenticator, error) {
	var auths []auth.Authenticator
	if o.tokensFile != "" {
		a, err := auth.NewTokenFile(o.tokensFile)
		if err != nil {
			return nil, err
		}
		auths = append(auths, a)
	}
	if o.jwksFile != "" || o.jwtIssuer != "" {
		a, err := o.oauth.jwks(o, log)
		if err != nil {
			return nil, err
		}
		auths = append(auths, a)
	}
	if len(auths) > 0 {
		return auth.AnyOf(auths...), nil
	}
	if host, _, err := net.SplitHostPort(o.http); !o.stdio && err == nil {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			log.Warn("NO AUTHENTICATION: the gateway listens beyond loopback and every client is \"anonymous\"; pass --tokens-file or --jwks-file", "http", o.http)
		}
	}
	return nil, nil
}

// options builds the gateway's options over conn, the coordinators'
// connection: their API, and their health for /readyz. A *dial.Conn is
// redialled when the gateway finds it half-dead.
func (o *gatewayFlags) options(conn grpc.ClientConnInterface, log *slog.Logger) gateway.Options {
	var origins []string
	for _, s := range strings.Split(o.origins, ",") {
		if s = strings.TrimSpace(s); s != "" {
			origins = append(origins, s)
		}
	}
	return gateway.Options{
		Name: o.name, CallTimeout: o.callTimeout, ScopeLimit: o.scopeLimit, WriteTimeout: o.writeTimeout,
		GlobalLimit: o.globalLimit, PingInterval: o.ping, AllowedOrigins: origins, Version: cmdline.Version(), Logger: log,
		Auth: o.oauth.options(o), StateKey: o.stateKey, Coordinator: conn,
	}
}

func parseGatewayFlags(s cmdline.Streams, args []string) (*gatewayFlags, error) {
	o := &gatewayFlags{}
	f := cmdline.NewFlags(s, "gateway", aboutGateway)
	o.register(f, true)
	f.TLS(&o.tls)
	f.Config()
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	return o, o.check()
}

func runGateway(ctx context.Context, s cmdline.Streams, args []string) error {
	o, err := parseGatewayFlags(s, args)
	if err != nil {
		return err
	}
	lis := o.listeners()
	if err := cmdline.ListenAll(lis.http, lis.admin); err != nil {
		return err
	}
	defer lis.close() // those serveGateway did not take
	log := cmdline.NewLogger(s.Stderr, *o.logLevel)
	sec, err := cmdline.LoadTLS(o.tls, log)
	if err != nil {
		return err
	}
	conn, err := dial.Open(o.coordinator, sec.DialOptions(tlsconfig.RoleCoordinator)...)
	if err != nil {
		return err
	}
	defer conn.Close()
	gopts := o.options(conn, log)
	gopts.WorkerDialOptions = sec.DialOptions(tlsconfig.RoleWorker)
	if gopts.Authenticator, err = o.authenticator(log); err != nil {
		return err
	}
	g := gateway.New(gopts)
	shutdownOf(ctx).waitsFor(func() string { return callsInFlight(g.Registry(), gatewayInFlight, o.grace) })
	return serveGateway(ctx, s, g, o, lis)
}

// gatewayListeners are the gateway's addresses: --http (none with
// --stdio) and --admin.
type gatewayListeners struct{ http, admin *cmdline.Addr }

func (o *gatewayFlags) listeners() gatewayListeners {
	l := gatewayListeners{http: &cmdline.Addr{Flag: "http", Addr: o.http}, admin: &cmdline.Addr{Flag: "admin", Addr: o.admin}}
	if o.stdio {
		l.http.Addr = ""
	}
	return l
}

// close closes the listeners, for a return before serving them.
func (l gatewayListeners) close() { closeListeners(l.http, l.admin) }

// serveGateway runs g on stdio or on lis.http until ctx is done or stdin
// ends.
func serveGateway(ctx context.Context, s cmdline.Streams, g *gateway.Gateway, o *gatewayFlags, lis gatewayListeners) error {
	defer o.oauth.close()
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	var eg errgroup.Group
	eg.Go(func() error { return g.Run(runCtx) })
	eg.Go(func() error { return serveAdmin(runCtx, s.Stderr, lis.admin.Lis, g.Registry()) })
	var err error
	if o.stdio {
		err = g.ServeStdio(ctx, os.Stdin, s.Stdout)
		g.Close()
	} else {
		fmt.Fprintf(s.Stderr, "mcp: http://%s/mcp\n", lis.http.Lis.Addr())
		err = g.ServeHTTP(ctx, lis.http.Lis, o.grace)
	}
	stopRun()
	return errors.Join(err, eg.Wait())
}
