// Package cmdline is the shape every mcpcancel subcommand shares: flags
// that also read MCPCANCEL_* environment variables and, for the commands
// that run a component, a --config file of settings, the streams a command
// writes, how its error maps to an exit status, listening on a flag's
// address, and the --tls-* flags turned into gRPC options. The binary
// (cmd/mcpcancel) and the client commands (internal/clientcmd) use it; it
// imports none of the components.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/mcpcancel/mcpcancel/internal/version"
)

// Version is the release of mcpcancel (internal/version): the one the
// build stamped, else the tagged module version, else "devel".
func Version() string { return version.Release() }

// IsHelpFlag says whether arg asks for help where a command or verb
// should be.
func IsHelpFlag(arg string) bool {
	return slices.Contains([]string{"-h", "-help", "--help"}, arg)
}

// Exit statuses.
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitInterrupted = 130 // a second SIGINT or SIGTERM
)

// ExitCode is a command's own exit status for an outcome it has already
// reported (mcpcancel call: tool error, cancelled).
type ExitCode int

func (c ExitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// usageError is a command line that cannot run; the program exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Usage marks err as a command line that cannot run: the program prints
// it with a hint to the command's help and exits 2.
func Usage(err error) error { return usageError{err} }

// Streams are where one invocation writes.
type Streams struct{ Stdout, Stderr io.Writer }

// ExitStatus reports err, if any, for the command name and maps it to an
// exit status.
func ExitStatus(stderr io.Writer, name string, err error) int {
	var code ExitCode
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "mcpcancel %s: %v\n%s", name, err, helpHint(name))
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "mcpcancel %s: %v\n", name, err)
		return ExitFailed
	}
}

func helpHint(name string) string {
	if name == "help" {
		return "Run 'mcpcancel help' for the commands.\n"
	}
	return fmt.Sprintf("Run 'mcpcancel help %s' for its flags.\n", name)
}
