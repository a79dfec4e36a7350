// Command bench measures mcpcancel against its floor: an etcd commit and a
// watch delivery, and a plain Go SDK MCP server, all in the same run on the
// same machine (these machines are noisy, so only ratios within one run
// mean much). See the "Benchmarks" section of the README.
//
//	go run ./bench [--quick] [--json FILE]
//	go run ./bench --mcp URL --coordinator ADDR   # an existing deployment
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config sizes one run.
type config struct {
	quick         bool
	jsonFile      string
	mcpURL        string // an existing gateway; empty: start the system here
	coordinator   string
	floorN        int             // floor samples
	cancelN       int             // cancels per transport
	commitN       int             // sequential echo calls counted for commits
	clients       int             // concurrent throughput clients
	window        time.Duration   // throughput window, each server
	ceilingWindow time.Duration   // etcd Txn rate window
	memCalls      int             // calls in flight for memory and the storm
	only          map[string]bool // parts to run; empty: all
	cpuProfile    string          // write this process's CPU profile here
	profileDir    string          // write the components' CPU profiles during the storm here
}

// parts are what --only may name.
var parts = []string{"floor", "cancel", "commits", "throughput", "memory"}

// runs says whether part is to be measured.
func (c config) runs(part string) bool { return len(c.only) == 0 || c.only[part] }

func quickConfig() config {
	return config{quick: true, floorN: 300, cancelN: 100, commitN: 100, clients: 64, window: 3 * time.Second, ceilingWindow: 2 * time.Second, memCalls: 1000}
}

func fullConfig() config {
	return config{floorN: 2000, cancelN: 2000, commitN: 500, clients: 64, window: 10 * time.Second, ceilingWindow: 5 * time.Second, memCalls: 10000}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
		os.Exit(1)
	}
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smaller counts and shorter windows (under a minute on 2 cores); the output says so")
	jsonFile := fs.String("json", "", "also write the figures as one JSON object to `FILE`")
	mcpURL := fs.String("mcp", "", "measure an existing gateway at this MCP `URL` instead of starting the system (throughput only; see README)")
	coord := fs.String("coordinator", "", "the existing deployment's coordinator `HOST:PORT` (with --mcp)")
	cpu := fs.String("cpuprofile", "", "write a CPU profile of this process (etcd, coordinator, worker, gateway and clients, in-process) to `FILE`; go tool pprof reads it")
	profDir := fs.String("storm-profiles", "", "write 5 s CPU profiles of the gateway, coordinator and worker processes, taken as the storm starts, to `DIR`/<component>-storm.pprof, and their heap profiles with the calls in flight to DIR/<component>-inflight.heap.pprof")
	only := fs.String("only", "", "measure only these comma-separated `parts`: "+strings.Join(parts, ", ")+" (memory includes the storm; the cancel ratios need floor)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c := fullConfig()
	if *quick {
		c = quickConfig()
	}
	c.jsonFile, c.mcpURL, c.coordinator, c.cpuProfile, c.profileDir = *jsonFile, *mcpURL, *coord, *cpu, *profDir
	if *only != "" {
		c.only = map[string]bool{}
		for _, p := range strings.Split(*only, ",") {
			if !slices.Contains(parts, p) {
				return config{}, fmt.Errorf("--only: unknown part %q (parts: %s)", p, strings.Join(parts, ", "))
			}
			c.only[p] = true
		}
	}
	if (c.mcpURL == "") != (c.coordinator == "") {
		return config{}, errors.New("--mcp and --coordinator go together")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r, err := measure(ctx, c, stderr)
	if r != nil {
		r.print(stdout)
		if c.jsonFile != "" {
			if werr := r.writeJSON(c.jsonFile); werr != nil {
				return errors.Join(err, werr)
			}
		}
	}
	return err
}

// measure runs every measurement c asks for, logging progress on stderr.
// It returns what it measured even when a later step fails.
func measure(ctx context.Context, c config, stderr io.Writer) (*result, error) {
	start := time.Now()
	r := newResult(c.quick)
	defer func() { r.Seconds, r.LoadAvgEnd = round(time.Since(start).Seconds(), 1), loadAvg() }()
	if c.quick {
		r.Notes = append(r.Notes, fmt.Sprintf("QUICK MODE: %d floor samples, %d cancels per transport, %v throughput windows, %d calls in flight for memory and the storm (the full run: 2000, 2000, 10s, 10000)",
			c.floorN, c.cancelN, c.window, c.memCalls))
	}
	progress := func(format string, a ...any) {
		fmt.Fprintf(stderr, "bench: %5.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
	}
	if c.mcpURL != "" {
		return r, measureRemote(ctx, c, r, progress)
	}
	dir, err := os.MkdirTemp("", "mcpcancel-bench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if err := measureInProcess(ctx, c, r, dir, log, progress); err != nil {
		return r, err
	}
	if !c.runs("memory") {
		return r, nil
	}
	return r, measureProcesses(ctx, c, r, dir, progress)
}
