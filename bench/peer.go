package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// peerSessions is how many sessions load each peer at once.
const peerSessions = 16

// peerLabels prefixes the pprof labels of the adapter's system, apart
// from the main system's.
const peerLabels = "peer-"

// peer is one way of serving server-everything's echo to the benchmark's
// clients: server-everything itself over Streamable HTTP, mcp-proxy from
// npm fronting it over stdio, or mcpcancel's adapter fronting it over
// stdio behind a coordinator and gateway of its own.
type peer struct {
	name string
	url  string
	// cpu returns the CPU time used so far by the front (the proxy, or
	// mcpcancel's components) and by the upstream server-everything.
	cpu  func() (front, upstream time.Duration, err error)
	stop func()

	load                  *echoLoad
	frontCPU, upstreamCPU time.Duration
}

// measurePeers loads the three peers with the same echo calls in turn, in
// one-second slices: peerSessions sessions each for c.window, counting
// CPU per call; then one session each, call by call in turn, for the
// latency each front adds over server-everything itself.
func measurePeers(ctx context.Context, c config, r *result, dir string, log *slog.Logger, progress progressFunc) error {
	// Node's HTTP servers close a connection idle for 5 s (keepAliveTimeout):
	// a client that reuses one as it closes fails its call. Ours gives
	// idle connections up first.
	hc := benchHTTPClient(2 * peerSessions)
	hc.Transport.(*http.Transport).IdleConnTimeout = 3 * time.Second
	if c.cpuProfile != "" {
		r.Skipped = append(r.Skipped, "peers: they need the CPU profiler, which --cpuprofile holds")
		return nil
	}
	pdir, err := peerDir()
	if err != nil {
		r.Skipped = append(r.Skipped, "peers: "+err.Error())
		return nil
	}
	progress("peers: starting server-everything, mcp-proxy fronting it over stdio, and mcpcancel's adapter fronting it over stdio")
	peers, err := startPeers(ctx, pdir, filepath.Join(dir, "peer"), log)
	defer func() {
		for _, p := range peers {
			if p.load != nil {
				p.load.close()
			}
			p.stop()
		}
	}()
	if err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	for _, p := range peers {
		if p.load, err = newLoad(ctx, p.url, hc, peerSessions, everythingEcho); err != nil {
			return fmt.Errorf("peers: %s: %w", p.name, err)
		}
	}
	progress("peers: %d sessions calling server-everything's echo for %v via each, alternating every %v", peerSessions, c.window, throughputSlice)
	if err := peerRates(ctx, peers, c.window); err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	progress("peers: %d echo calls by one session on each, in turn", c.floorN)
	urls := make([]string, len(peers))
	for i, p := range peers {
		urls[i] = p.url
	}
	lat, err := alternateLatency(ctx, c.floorN, hc, everythingEcho, urls...)
	if err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	r.PeerSessions, r.Peers = peerSessions, map[string]peerJS{}
	direct := summarise(lat[0])
	for i, p := range peers {
		n := time.Duration(max(p.load.calls, 1))
		d := summarise(lat[i])
		r.Peers[p.name] = peerJS{
			CallsPerSec:           round(p.load.rate(), 0),
			FrontCPUPerCall:       ms(p.frontCPU / n),
			UpstreamCPUPerCall:    ms(p.upstreamCPU / n),
			CPUPerCall:            ms((p.frontCPU + p.upstreamCPU) / n),
			OneSessionCallsPerSec: round(float64(d.N)/sum(lat[i]).Seconds(), 0),
			P50:                   ms(d.P50), P99: ms(d.P99),
			AddedP50: ms(d.P50 - direct.P50), AddedP99: ms(d.P99 - direct.P99),
		}
	}
	return nil
}

func sum(d []time.Duration) time.Duration {
	var t time.Duration
	for _, v := range d {
		t += v
	}
	return t
}

// peerRates loads each peer in turn for a slice, until each had window,
// adding the CPU each peer's processes (or, for mcpcancel, its labelled
// components) used during its own slices.
func peerRates(ctx context.Context, peers []*peer, window time.Duration) error {
	prof, err := startCPUProfile()
	if err != nil {
		return err // --cpuprofile: measurePeers says it skipped
	}
	var labelled time.Duration // mcpcancel's front CPU is read from the profile, over its slices only
	for done := time.Duration(0); done < window; done += throughputSlice {
		d := min(throughputSlice, window-done)
		for _, p := range peers {
			f0, u0, err := p.cpu()
			if err != nil {
				prof.stop()
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if err := p.load.run(ctx, d); err != nil {
				prof.stop()
				return fmt.Errorf("%s: %w", p.name, err)
			}
			f1, u1, err := p.cpu()
			if err != nil {
				prof.stop()
				return fmt.Errorf("%s: %w", p.name, err)
			}
			p.frontCPU, p.upstreamCPU = p.frontCPU+f1-f0, p.upstreamCPU+u1-u0
		}
	}
	byLabel, err := prof.stop()
	if err != nil {
		return err
	}
	for _, comp := range components {
		labelled += byLabel[peerLabels+comp]
	}
	for _, p := range peers {
		if p.name == "mcpcancel" {
			p.frontCPU = labelled
		}
	}
	return nil
}

// startPeers starts the three peers; on error it returns those started,
// for the caller to stop.
func startPeers(ctx context.Context, pdir, dir string, log *slog.Logger) ([]*peer, error) {
	everything := filepath.Join(pdir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	proxy := filepath.Join(pdir, "node_modules", "mcp-proxy", "dist", "bin", "mcp-proxy.mjs")
	var peers []*peer
	port, err := freePort()
	if err != nil {
		return peers, err
	}
	ev, err := startNode(ctx, pdir, port, []string{"PORT=" + port}, everything, "streamableHttp")
	if err != nil {
		return peers, fmt.Errorf("server-everything: %w", err)
	}
	peers = append(peers, &peer{name: "direct", url: "http://127.0.0.1:" + port + "/mcp", stop: ev.stop,
		cpu: func() (time.Duration, time.Duration, error) {
			u, err := treeCPU(ev.pid())
			return 0, u, err
		}})
	if port, err = freePort(); err != nil {
		return peers, err
	}
	px, err := startNode(ctx, pdir, port, nil, proxy, "--host", "127.0.0.1", "--port", port, "--server", "stream", "--", "node", everything, "stdio")
	if err != nil {
		return peers, fmt.Errorf("mcp-proxy: %w", err)
	}
	peers = append(peers, &peer{name: "mcp_proxy", url: "http://127.0.0.1:" + port + "/mcp", stop: px.stop,
		cpu: func() (time.Duration, time.Duration, error) {
			f, err := procCPU(px.pid())
			if err != nil {
				return 0, 0, err
			}
			t, err := treeCPU(px.pid())
			return f, t - f, err
		}})
	s, err := startSystemWith(ctx, dir, log, systemOptions{labels: peerLabels, upstream: []string{"node", everything, "stdio"}})
	if err != nil {
		return peers, fmt.Errorf("mcpcancel's adapter: %w", err)
	}
	peers = append(peers, &peer{name: "mcpcancel", url: s.mcpURL, stop: s.close,
		cpu: func() (time.Duration, time.Duration, error) {
			if n := len(s.adapter.SessionPIDs()); n > 0 { // their CPU would go uncounted
				return 0, 0, fmt.Errorf("the adapter runs %d per-client upstream processes; want one shared", n)
			}
			u, err := treeCPU(s.adapter.PID())
			return 0, u, err // the front's CPU comes from the profile
		}})
	return peers, nil
}

// everythingEcho calls server-everything's echo tool.
func everythingEcho(ctx context.Context, cs *mcp.ClientSession) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}})
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if res.IsError || len(res.Content) != 1 {
		return fmt.Errorf("echo: isError %v, %d content items", res.IsError, len(res.Content))
	}
	if t, ok := res.Content[0].(*mcp.TextContent); !ok || t.Text != "Echo: hello" {
		return fmt.Errorf("echo: got %#v, want the text Echo: hello", res.Content[0])
	}
	return nil
}

// peerDir is bench/peer, where npm installs the peers from their
// lockfile (npm ci), found from this source file; npm ci runs when its
// node_modules do not match the lockfile.
func peerDir() (string, error) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s is not installed", tool)
		}
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate bench/peer")
	}
	dir := filepath.Join(filepath.Dir(file), "peer")
	want, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", err
	}
	stamp := filepath.Join(dir, "node_modules", ".mcpcancel-installed")
	if got, err := os.ReadFile(stamp); err == nil && bytes.Equal(got, want) {
		return dir, nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir, os.WriteFile(stamp, want, 0o644)
}

// freePort is a loopback port free a moment ago, for servers that take
// only a port number.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port, nil
}

// nodeProc is a node process in a process group of its own.
type nodeProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *nodeProc) pid() int { return p.cmd.Process.Pid }

// stop signals the group to terminate, kills it after 10s, and waits.
func (p *nodeProc) stop() {
	syscall.Kill(-p.pid(), syscall.SIGTERM)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.exited
	}
}

// startNode runs node with args in dir and waits until it accepts
// connections on port.
func startNode(ctx context.Context, dir, port string, env []string, args ...string) (*nodeProc, error) {
	cmd := exec.Command("node", args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &nodeProc{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		select {
		case <-p.exited: // its output's writers are done
			return nil, fmt.Errorf("exited: %v\n%s", cmd.ProcessState, out.String())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond): // poll until it listens
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("not listening on %s after 60s", port)
		}
	}
}
