package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/worker"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// serversKey is the --config key of the MCP servers a worker (or dev)
// fronts at once, by name.
const serversKey = "servers"

// serverConfig is one server of the config file's "servers": the
// --upstream-* flags of one server without their prefix, and its
// per-tool options (allow, deny, tools) as in an --upstream-config file.
type serverConfig struct {
	Stdio            string            `json:"stdio"`
	HTTP             string            `json:"http"`
	Sessions         string            `json:"sessions"`
	MaxSessions      int               `json:"max-sessions"`
	MaxConcurrency   int               `json:"max-concurrency"`
	ConnectTimeout   upstream.Duration `json:"connect-timeout"`
	HeaderFile       string            `json:"header-file"`
	TokenURL         string            `json:"token-url"`
	ClientID         string            `json:"client-id"`
	ClientSecretFile string            `json:"client-secret-file"`
	Scopes           string            `json:"scopes"`
	upstream.Config
}

// errServersAndUpstream refuses a config file's servers beside the
// flags of the one upstream server.
var errServersAndUpstream = errors.New("the --config file's servers and the --upstream-* flags of a single server cannot be used together: name every server under servers")

// servers are the servers of a config file, by name.
type servers map[string]upstreamFlags

// parseServers reads the "servers" of the config file, if any. The
// --upstream-sessions, --upstream-max-sessions and
// --upstream-connect-timeout in effect are the defaults of every server.
func parseServers(cf *cmdline.ConfigFile, defaults *upstreamFlags) (servers, error) {
	raw, ok := cf.Extra[serversKey]
	if !ok {
		return nil, nil
	}
	var byName map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byName); err != nil || len(byName) == 0 {
		return nil, fmt.Errorf("%s: servers: want an object of servers by name, such as {\"files\": {\"stdio\": \"...\"}}", cf.Path)
	}
	out := servers{}
	for _, name := range slices.Sorted(maps.Keys(byName)) { // the same error first on every run
		err := upstream.CheckServerName(name)
		var u upstreamFlags
		if err == nil {
			u, err = parseServer(byName[name], defaults)
		}
		if err == nil {
			err = u.checkServer()
		}
		if err != nil {
			return nil, fmt.Errorf("%s: servers.%s: %w", cf.Path, name, err)
		}
		out[name] = u
	}
	return out, nil
}

// parseServer decodes one server, refusing unknown keys.
func parseServer(b json.RawMessage, defaults *upstreamFlags) (upstreamFlags, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s serverConfig
	if err := dec.Decode(&s); err != nil {
		return upstreamFlags{}, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	u := upstreamFlags{
		stdio: s.Stdio, http: s.HTTP, sessions: s.Sessions, maxSessions: s.MaxSessions,
		maxConcurrency: s.MaxConcurrency, connectWait: time.Duration(s.ConnectTimeout),
		headerFile: s.HeaderFile, tokenURL: s.TokenURL, clientID: s.ClientID,
		clientSecretFile: s.ClientSecretFile, scopes: s.Scopes, tools: &s.Config,
	}
	if u.sessions == "" {
		u.sessions = defaults.sessions
	}
	if u.maxSessions == 0 {
		u.maxSessions = defaults.maxSessions
	}
	if u.connectWait == 0 {
		u.connectWait = defaults.connectWait
	}
	return u, nil
}

// checkServer is check for a server of the config file, naming its keys.
func (u *upstreamFlags) checkServer() error {
	switch {
	case (u.stdio == "") == (u.http == ""):
		return errors.New(`give one of "stdio" (a command) and "http" (a URL)`)
	case u.maxSessions < 0 || u.maxConcurrency < 0:
		return errors.New("max-sessions and max-concurrency must not be negative")
	case u.connectWait <= 0:
		return errors.New("connect-timeout must be positive")
	case u.http == "" && (u.headerFile != "" || u.tokenURL != ""):
		return errors.New("header-file and token-url are credentials for an http server")
	case u.headerFile != "" && u.tokenURL != "":
		return errors.New("give one of header-file and token-url, not both")
	case u.tokenURL != "" && (u.clientID == "" || u.clientSecretFile == ""):
		return errors.New("token-url needs client-id and client-secret-file")
	}
	if u.stdio != "" {
		if err := checkCommand(u.stdio); err != nil {
			return fmt.Errorf("stdio: %w", err)
		}
	}
	if _, err := upstream.ParseSessionMode(u.sessions); err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	return u.tools.Check()
}

// checkCommand refuses a command that does not split, or whose program
// is not there: it will not appear, so say so before anything starts
// rather than retry it for ever.
func checkCommand(s string) error {
	cmd, err := upstream.SplitCommand(s)
	if err != nil {
		return err
	}
	_, err = exec.LookPath(cmd[0])
	return err
}

// set says whether the file names any server.
func (ss servers) set() bool { return len(ss) > 0 }

// names are the servers' names, sorted.
func (ss servers) names() []string {
	names := make([]string, 0, len(ss))
	for n := range ss {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// group builds the group of adapters fronting every server from w.
func (ss servers) group(w *worker.Worker, log *slog.Logger) (*upstream.Group, error) {
	g := upstream.NewGroup(w, log.With("part", "upstream"))
	for _, name := range ss.names() {
		u := ss[name]
		opts, err := u.options(log.With("part", "upstream", "server", name))
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", name, err)
		}
		if _, err := g.Add(name, opts); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// capacity is the worker capacity that honours every server's
// max-concurrency: their sum, when each has one.
func (ss servers) capacity(c int) int {
	sum := 0
	for _, u := range ss {
		if u.maxConcurrency == 0 {
			return c
		}
		sum += u.maxConcurrency
	}
	if c == 0 || c > sum {
		return sum
	}
	return c
}

// startGroup runs g until the returned stop is called; stop stops every
// upstream server and returns Run's error.
func startGroup(ctx context.Context, g *upstream.Group) (stop func() error) {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- g.Run(gctx) }()
	return func() error { cancel(); return <-done }
}
