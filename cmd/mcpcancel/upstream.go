package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/oauth2/clientcredentials"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// upstreamFlags front an existing MCP server as the worker's tools.
type upstreamFlags struct {
	stdio, http, config string
	maxConcurrency      int
	sessions            string
	maxSessions         int
	connectWait         time.Duration
	// The adapter's own credentials for --upstream-http; never a client's.
	headerFile, tokenURL, clientID, clientSecretFile, scopes string
	// tools are the per-tool options of a server of the config file's
	// "servers", which has no --upstream-config file.
	tools *upstream.Config
}

// register adds --upstream-stdio, --upstream-http and --upstream-config
// (dev needs the allow/deny lists too: a fronted server may have tools
// no anonymous client should reach), and with limits also
// --max-concurrency and the adapter's credentials.
func (u *upstreamFlags) register(f *cmdline.Flags, limits bool) {
	f.StringVar(&u.stdio, "upstream-stdio", "", "front the MCP server this `command` runs, over its stdio ('CMD ARGS...', split like a shell without expansion)")
	f.StringVar(&u.http, "upstream-http", "", "front the MCP server at this Streamable HTTP `URL`")
	f.StringVar(&u.config, "upstream-config", "", "JSON `file` of per-tool options: timeout, idempotent, allow/deny lists")
	f.StringVar(&u.sessions, "upstream-sessions", string(upstream.PerClient), "`per-client`: each client session gets an upstream session of its own (a process each over stdio), as if it talked to the server directly; shared: one connection for all clients")
	f.DurationVar(&u.connectWait, "upstream-connect-timeout", 30*time.Second, "how long the upstream server may take to start (or be reached) and answer initialize, and a call waits for it to come back")
	f.IntVar(&u.maxSessions, "upstream-max-sessions", 0, "most per-client upstream sessions at once (default 32 processes over stdio, 1024 sessions over HTTP); when full, the least recently used idle one is closed")
	if limits {
		f.IntVar(&u.maxConcurrency, "max-concurrency", 0, "most calls forwarded to the upstream server at once; 0 means no limit")
		f.StringVar(&u.headerFile, "upstream-header-file", "", "secret `file` with the header (\"Name: value\", or a bare bearer token) the adapter sends to --upstream-http, reread when it changes")
		f.StringVar(&u.tokenURL, "upstream-token-url", "", "OAuth token endpoint `URL`: the adapter gets its own client-credentials token for --upstream-http")
		f.StringVar(&u.clientID, "upstream-client-id", "", "OAuth client `id` for --upstream-token-url")
		f.StringVar(&u.clientSecretFile, "upstream-client-secret-file", "", "`file` holding the client secret for --upstream-token-url")
		f.StringVar(&u.scopes, "upstream-scopes", "", "space-separated `scopes` asked for with --upstream-token-url")
	}
}

func (u *upstreamFlags) set() bool { return u.stdio != "" || u.http != "" }

// given says whether any flag of the one server is given: the server,
// its --upstream-config, its --max-concurrency or its credentials.
func (u *upstreamFlags) given() bool {
	return u.set() || u.config != "" || u.maxConcurrency != 0 || u.headerFile != "" || u.tokenURL != ""
}

func (u *upstreamFlags) check() error {
	switch {
	case u.stdio != "" && u.http != "":
		return errors.New("pass one of --upstream-stdio and --upstream-http, not both")
	case u.maxSessions < 0:
		return fmt.Errorf("--upstream-max-sessions must not be negative, not %d", u.maxSessions)
	case u.connectWait <= 0:
		return fmt.Errorf("--upstream-connect-timeout must be positive, not %v", u.connectWait)
	case u.maxConcurrency < 0:
		return fmt.Errorf("--max-concurrency must not be negative, not %d", u.maxConcurrency)
	case !u.set() && (u.config != "" || u.maxConcurrency != 0):
		return errors.New("--upstream-config and --max-concurrency need --upstream-stdio or --upstream-http")
	case u.http == "" && (u.headerFile != "" || u.tokenURL != ""):
		return errors.New("--upstream-header-file and --upstream-token-url are credentials for --upstream-http")
	case u.headerFile != "" && u.tokenURL != "":
		return errors.New("pass one of --upstream-header-file and --upstream-token-url, not both")
	case u.tokenURL != "" && (u.clientID == "" || u.clientSecretFile == ""):
		return errors.New("--upstream-token-url needs --upstream-client-id and --upstream-client-secret-file")
	}
	if u.stdio != "" {
		cmd, err := upstream.SplitCommand(u.stdio)
		if err != nil {
			return fmt.Errorf("--upstream-stdio: %w", err)
		}
		// A program that is not there will not appear: say so before
		// anything starts, rather than retry it for ever.
		if _, err := exec.LookPath(cmd[0]); err != nil {
			return fmt.Errorf("--upstream-stdio: %w", err)
		}
	}
	if _, err := upstream.ParseSessionMode(u.sessions); err != nil {
		return fmt.Errorf("--upstream-sessions: %w", err)
	}
	return nil
}

// adapter builds the adapter for w.
func (u *upstreamFlags) adapter(w *worker.Worker, log *slog.Logger) (*upstream.Adapter, error) {
	opts, err := u.options(log.With("part", "upstream"))
	if err != nil {
		return nil, err
	}
	return upstream.New(w, opts), nil
}

// options are the adapter's options.
func (u *upstreamFlags) options(log *slog.Logger) (upstream.Options, error) {
	mode, err := upstream.ParseSessionMode(u.sessions)
	if err != nil {
		return upstream.Options{}, err
	}
	opts := upstream.Options{
		URL: u.http, MaxConcurrency: u.maxConcurrency, Sessions: mode, MaxSessions: u.maxSessions,
		ConnectWait: u.connectWait, Logger: log, Config: u.tools,
	}
	if u.stdio != "" {
		cmd, err := upstream.SplitCommand(u.stdio)
		if err != nil {
			return upstream.Options{}, err
		}
		opts.Command = cmd
	}
	if u.config != "" {
		cfg, err := upstream.LoadConfig(u.config)
		if err != nil {
			return upstream.Options{}, err
		}
		opts.Config = cfg
	}
	creds := upstream.Credentials{HeaderFile: u.headerFile}
	if u.tokenURL != "" {
		secret, err := os.ReadFile(u.clientSecretFile)
		if err != nil {
			return upstream.Options{}, fmt.Errorf("--upstream-client-secret-file: %w", err)
		}
		creds.ClientCredentials = &clientcredentials.Config{
			ClientID: u.clientID, ClientSecret: strings.TrimSpace(string(secret)), TokenURL: u.tokenURL,
			Scopes: strings.Fields(u.scopes), EndpointParams: url.Values{"resource": {u.http}},
		}
	}
	if u.headerFile != "" || creds.ClientCredentials != nil {
		hc, err := creds.HTTPClient(nil)
		if err != nil {
			return upstream.Options{}, err
		}
		opts.HTTPClient = hc
	}
	return opts, nil
}

// capacity is the worker capacity that also honours --max-concurrency,
// so the coordinator routes no more calls here than the upstream takes.
func (u *upstreamFlags) capacity(c int) int {
	if u.maxConcurrency > 0 && (c == 0 || c > u.maxConcurrency) {
		return u.maxConcurrency
	}
	return c
}

// startAdapter runs a until the returned stop is called; stop kills the
// upstream server and returns Run's error. The adapter keeps (re)starting
// the server meanwhile; a.Ready tells when its tools were first offered.
func startAdapter(ctx context.Context, a *upstream.Adapter) (stop func() error) {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	return func() error { cancel(); return <-done }
}
