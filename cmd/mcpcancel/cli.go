package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/mcpcancel/mcpcancel/internal/clientcmd"
	"github.com/mcpcancel/mcpcancel/internal/cmdline"
	"github.com/mcpcancel/mcpcancel/internal/version"
)

// subcommand is one command of the binary.
type subcommand struct {
	name, summary string
	run           func(ctx context.Context, s cmdline.Streams, args []string) error
}

// commands lists the subcommands (a function, as help refers back to it).
func commands() []subcommand {
	return []subcommand{
		{"dev", "run everything in one process (embedded etcd, coordinator, demo worker, gateway)", runDev},
		{"gateway", "run a gateway: MCP for clients, over Streamable HTTP or stdio", runGateway},
		{"call", "call a tool over MCP, showing progress; cancel it with Ctrl-C, then see its audit", clientcmd.RunCall},
		{"coordinator", "run a coordinator replica (the control plane, in front of etcd)", runCoordinator},
		{"audit", "list or follow the audit of decided calls (audit list, audit tail)", clientcmd.RunAudit},
		{"calls", "list the calls in flight; --watch follows them as they start and settle", clientcmd.RunCalls},
		{"cancel", "cancel a running call as an operator (audited with your identity)", clientcmd.RunCancel},
		{"tools", "list the tools the workers offer, with their arguments", clientcmd.RunTools},
		{"console", "serve the web console for a coordinator: calls in flight, decisions, audit", clientcmd.RunConsole},
		{"worker", "run a worker that serves tools (--demo: the demo tools)", runWorker},
		{"version", "print the version", runVersion},
		{"help", "show this help, or a command's flags: help COMMAND", runHelp},
	}
}

func lookup(name string) (subcommand, bool) {
	cs := commands()
	i := slices.IndexFunc(cs, func(c subcommand) bool { return c.name == name })
	if i < 0 {
		return subcommand{}, false
	}
	return cs[i], true
}

// Main runs the mcpcancel command line args (without the program name)
// and returns the exit status. The first SIGINT, SIGTERM or SIGHUP ends ctx for a
// graceful stop; a second exits at once with status 130.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := onSignals(ctx, stderr, os.Exit)
	defer stop()
	return run(ctx, cmdline.Streams{Stdout: stdout, Stderr: stderr}, args)
}

func run(ctx context.Context, s cmdline.Streams, args []string) int {
	if len(args) == 0 {
		usage(s.Stderr)
		return cmdline.ExitUsage
	}
	name := args[0]
	if cmdline.IsHelpFlag(name) {
		name = "help"
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(s.Stderr, "mcpcancel: unknown command %q\n\n", name)
		usage(s.Stderr)
		return cmdline.ExitUsage
	}
	stopTelemetry, err := startTelemetry(ctx, s, name)
	if err != nil {
		return cmdline.ExitStatus(s.Stderr, name, err)
	}
	defer stopTelemetry()
	return cmdline.ExitStatus(s.Stderr, name, c.run(ctx, s, args[1:]))
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: mcpcancel COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nEvery flag may also be set in the environment as MCPCANCEL_<FLAG>,\n"+
		"e.g. --drain-timeout as MCPCANCEL_DRAIN_TIMEOUT; the command line wins.\n"+
		"dev, gateway, coordinator and worker also read --config FILE (JSON or\n"+
		"YAML, keyed by the long flag names), which both of those win over.\n")
}

func runHelp(ctx context.Context, s cmdline.Streams, args []string) error {
	if len(args) == 0 {
		usage(s.Stdout)
		return nil
	}
	c, ok := lookup(args[0])
	if !ok || c.name == "help" {
		return cmdline.Usage(fmt.Errorf("no command %q", args[0]))
	}
	return c.run(ctx, s, []string{"--help"}) // prints its flags
}

func runVersion(_ context.Context, s cmdline.Streams, args []string) error {
	f := cmdline.NewFlags(s, "version", "Prints the release and commit of mcpcancel, the Go that built it, and the wire and etcd schema versions it speaks.")
	asJSON := f.Bool("json", false, "print it as JSON, as the admin port's /version serves it")
	if err := f.Parse(args); err != nil {
		return err
	}
	info := version.Get()
	if *asJSON {
		return json.NewEncoder(s.Stdout).Encode(info)
	}
	_, err := fmt.Fprint(s.Stdout, info)
	return err
}
