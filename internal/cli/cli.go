// Package cli is the mcpcancel command line: it parses the subcommands and
// their flags (each also read from a MCPCANCEL_* environment variable),
// sets up logging and signals, and runs the coordinator or a worker. The
// mcpcancel binary's main does nothing but call Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
)

// Version is the version `mcpcancel version` prints. Release builds set it
// with -ldflags "-X github.com/mcpcancel/mcpcancel/internal/cli.Version=v1.2.3";
// otherwise it comes from the module's build info, or is "dev".
var Version string

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130 // a second SIGINT or SIGTERM
)

// exitCode is a command's own exit status for an outcome it has already
// reported (mcpcancel call: tool error, cancelled).
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// usageError is a command line that cannot run; the program exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// streams are where one invocation writes.
type streams struct{ stdout, stderr io.Writer }

// command is one subcommand.
type command struct {
	name, summary string
	run           func(ctx context.Context, s streams, args []string) error
}

// commands lists the subcommands (a function, as help refers back to it).
func commands() []command {
	return []command{
		{"dev", "run everything in one process (embedded etcd, coordinator, demo worker, gateway)", runDev},
		{"gateway", "run a gateway: MCP for clients, over Streamable HTTP or stdio", runGateway},
		{"call", "call a tool over MCP, showing progress; cancel it with Ctrl-C, then see its audit", runCall},
		{"coordinator", "run a coordinator replica (the control plane, in front of etcd)", runCoordinator},
		{"audit", "list or follow the audit of decided calls (audit list, audit tail)", runAudit},
		{"cancel", "cancel a running call as an operator (audited with your identity)", runCancel},
		{"tools", "list the tools the workers offer, with their arguments", runTools},
		{"console", "serve the web console for a coordinator: calls in flight, decisions, audit", runConsole},
		{"worker", "run a worker that serves tools (--demo: the demo tools)", runWorker},
		{"version", "print the version", runVersion},
		{"help", "show this help, or a command's flags: help COMMAND", runHelp},
	}
}

func lookup(name string) (command, bool) {
	cs := commands()
	i := slices.IndexFunc(cs, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return cs[i], true
}

// Main runs the mcpcancel command line args (without the program name)
// and returns the exit status. The first SIGINT or SIGTERM ends ctx for a
// graceful stop; a second exits at once with status 130.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := onSignals(ctx, stderr, os.Exit)
	defer stop()
	return run(ctx, streams{stdout, stderr}, args)
}

func run(ctx context.Context, s streams, args []string) int {
	if len(args) == 0 {
		usage(s.stderr)
		return exitUsage
	}
	name := args[0]
	if isHelpFlag(name) {
		name = "help"
	}
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(s.stderr, "mcpcancel: unknown command %q\n\n", name)
		usage(s.stderr)
		return exitUsage
	}
	stopTelemetry, err := startTelemetry(ctx, s, name)
	if err != nil {
		return exitStatus(s.stderr, name, err)
	}
	defer stopTelemetry()
	return exitStatus(s.stderr, name, c.run(ctx, s, args[1:]))
}

func isHelpFlag(arg string) bool {
	return slices.Contains([]string{"-h", "-help", "--help"}, arg)
}

// exitStatus reports err, if any, and maps it to an exit status.
func exitStatus(stderr io.Writer, name string, err error) int {
	var code exitCode
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "mcpcancel %s: %v\n%s", name, err, helpHint(name))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "mcpcancel %s: %v\n", name, err)
		return exitFailed
	}
}

func helpHint(name string) string {
	if name == "help" {
		return "Run 'mcpcancel help' for the commands.\n"
	}
	return fmt.Sprintf("Run 'mcpcancel help %s' for its flags.\n", name)
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: mcpcancel COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nEvery flag may also be set in the environment as MCPCANCEL_<FLAG>,\n"+
		"e.g. --drain-timeout as MCPCANCEL_DRAIN_TIMEOUT; the command line wins.\n")
}

func runHelp(ctx context.Context, s streams, args []string) error {
	if len(args) == 0 {
		usage(s.stdout)
		return nil
	}
	c, ok := lookup(args[0])
	if !ok || c.name == "help" {
		return usageError{fmt.Errorf("no command %q", args[0])}
	}
	return c.run(ctx, s, []string{"--help"}) // prints its flags
}

func runVersion(_ context.Context, s streams, args []string) error {
	f := newFlags(s, "version", "Prints the version of mcpcancel.")
	if err := f.parse(args); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "mcpcancel %s\n", version())
	return nil
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return strings.TrimSpace(bi.Main.Version)
	}
	return "dev"
}
