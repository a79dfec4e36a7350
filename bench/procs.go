package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildBinary builds cmd/mcpcancel into dir, so that components can run
// as processes of their own and their heaps be read apart.
func buildBinary(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "mcpcancel")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/mcpcancel/mcpcancel/cmd/mcpcancel")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building mcpcancel: %w", err)
	}
	return bin, nil
}

// proc is a component running as its own process. Its stderr is scanned
// for the "name: value" lines every component prints on start.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu    sync.Mutex
	lines map[string]string
	tail  []string // last lines of stderr, for errors
	seen  chan struct{}
	read  chan struct{} // closed when stderr ends
}

func newProc(name string, cmd *exec.Cmd) (*proc, io.Reader, error) {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	return &proc{name: name, cmd: cmd, lines: map[string]string{}, seen: make(chan struct{}, 1), read: make(chan struct{})}, stderr, nil
}

// startProc starts bin with args and waits until it has printed a line
// for every key of want.
func startProc(ctx context.Context, name, bin string, want []string, args ...string) (*proc, error) {
	p, stderr, err := newProc(name, exec.Command(bin, args...))
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go p.scan(stderr)
	if err := p.await(ctx, want); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *proc) scan(r io.Reader) {
	defer close(p.read)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.Contains(k, " ") {
			if _, dup := p.lines[k]; !dup {
				p.lines[k] = strings.Fields(v + " ")[0]
			}
		}
		p.tail = append(p.tail[max(0, len(p.tail)-19):], line)
		p.mu.Unlock()
		select {
		case p.seen <- struct{}{}:
		default:
		}
	}
}

func (p *proc) await(ctx context.Context, want []string) error {
	t := time.NewTimer(60 * time.Second)
	defer t.Stop()
	for {
		if p.has(want) {
			return nil
		}
		select {
		case <-p.seen:
		case <-p.read:
			if p.has(want) {
				return nil
			}
			return fmt.Errorf("%s exited before printing %v:\n%s", p.name, want, p.stderrTail())
		case <-t.C:
			return fmt.Errorf("%s did not print %v within 60s:\n%s", p.name, want, p.stderrTail())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *proc) has(want []string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range want {
		if p.lines[k] == "" {
			return false
		}
	}
	return true
}

func (p *proc) get(k string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines[k]
}

func (p *proc) stderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop asks the process to stop (SIGTERM), kills it after 20s, and waits.
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { defer close(done); p.cmd.Wait() }()
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.cmd.Process.Kill()
		<-done
	}
}

// memStats are the runtime.MemStats lines of a heap profile fetched with
// ?gc=1&debug=1: HeapAlloc is live heap after a collection; stackInuse
// (the "# Stack = inuse / sys" line) is goroutine stacks, which are not heap.
type memStats struct{ heapAlloc, stackInuse float64 }

func readMem(ctx context.Context, hc *http.Client, admin string) (memStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return memStats{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return memStats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return memStats{}, fmt.Errorf("heap profile of %s: %s", admin, resp.Status)
	}
	return parseMemStats(resp.Body)
}

func parseMemStats(r io.Reader) (memStats, error) {
	var m memStats
	var found int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var v float64
		line := sc.Text()
		if _, err := fmt.Sscanf(line, "# HeapAlloc = %g", &v); err == nil {
			m.heapAlloc, found = v, found|1
		} else if _, err := fmt.Sscanf(line, "# Stack = %g", &v); err == nil { // "# Stack = inuse / sys"
			m.stackInuse, found = v, found|2
		}
	}
	if found != 3 {
		return m, fmt.Errorf("heap profile without its HeapAlloc and Stack lines (%v)", sc.Err())
	}
	return m, nil
}

// gauge reads one unlabelled metric from a /metrics endpoint, asking for
// it uncompressed: polled every few milliseconds, gzip alone cost the
// worker a fifth of its CPU during the storm.
func gauge(ctx context.Context, hc *http.Client, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return metricValue(bufio.NewScanner(resp.Body), name)
}
