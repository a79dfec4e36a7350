package robustness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// process is one component run as its own OS process, restartable with
// the same arguments (or new ones).
type process struct {
	name string
	dir  string // logs go to dir/name.log, appended across restarts

	mu   sync.Mutex
	bin  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

func newProcess(name, bin, dir string, args ...string) *process {
	return &process{name: name, bin: bin, dir: dir, args: args}
}

// start starts the process; it must not be running.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(p.dir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== %s start %s %v\n", time.Now().Format(time.RFC3339Nano), p.bin, p.args)
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { // owned by the process: reaped here, waited for via done
		cmd.Wait()
		log.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// signal sends sig to the running process.
func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the process and waits until it is gone.
func (p *process) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	<-done
}

// stop asks the process to end (SIGTERM), and kills it after grace: with
// SIGQUIT first, so that a Go process writes its goroutines to its log
// and shows what held it up, then SIGKILL if it is not gone in 2 s.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		cmd.Process.Signal(syscall.SIGQUIT)
		quit := time.NewTimer(2 * time.Second)
		defer quit.Stop()
		select {
		case <-done:
		case <-quit.C:
			cmd.Process.Kill()
			<-done
		}
	}
}

// exited says whether the last start has ended.
func (p *process) exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// setBin makes the next start run bin: another release (upgrade.go).
func (p *process) setBin(bin string) {
	p.mu.Lock()
	p.bin = bin
	p.mu.Unlock()
}

// binary is what the next start runs.
func (p *process) binary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bin
}

func (p *process) setArgs(args ...string) {
	p.mu.Lock()
	p.args = args
	p.mu.Unlock()
}

// waitFor polls cond until it holds, ctx ends or limit passes.
func waitFor(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
