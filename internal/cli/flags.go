package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// envPrefix starts the environment variable of every flag.
const envPrefix = "MCPCANCEL_"

// flags is one subcommand's flag set. A flag not given on the command
// line is read from its environment variable (see envName), if that is
// set and not empty.
type flags struct {
	fs    *flag.FlagSet
	s     streams
	about string // what the command does, for --help
}

func newFlags(s streams, name, about string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors are reported by exitStatus
	fs.Usage = func() {}
	return &flags{fs: fs, s: s, about: about}
}

// envName is the environment variable for a flag: --drain-timeout is
// MCPCANCEL_DRAIN_TIMEOUT.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse parses args, then fills the flags they left out from the
// environment. --help prints the flags and returns flag.ErrHelp.
func (f *flags) parse(args []string) error {
	err := f.fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.help(f.s.stdout)
		return err
	case err != nil:
		return usageError{err}
	case f.fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected argument %q", f.fs.Arg(0))}
	}
	return f.fromEnv(os.LookupEnv)
}

func (f *flags) fromEnv(lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		v, ok := lookup(envName(fl.Name))
		if err != nil || given[fl.Name] || !ok || v == "" {
			return
		}
		if e := f.fs.Set(fl.Name, v); e != nil {
			err = usageError{fmt.Errorf("%s=%q: invalid value for --%s: %v", envName(fl.Name), v, fl.Name, e)}
		}
	})
	return err
}

// help prints what the command does and every flag with its default and
// its environment variable.
func (f *flags) help(w io.Writer) {
	fmt.Fprintf(w, "Usage: mcpcancel %s [flags]\n\n%s\n", f.fs.Name(), f.about)
	hasFlags := false
	f.fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if !hasFlags {
		return
	}
	fmt.Fprint(w, "\nFlags (the command line wins over the environment):\n")
	f.fs.VisitAll(func(fl *flag.Flag) {
		value, usage := flag.UnquoteUsage(fl)
		fmt.Fprintf(w, "  %s\n      %s\n      default %s; env %s\n",
			strings.TrimSpace("--"+fl.Name+" "+value), usage, defaultOf(fl), envName(fl.Name))
	})
}

func defaultOf(fl *flag.Flag) string {
	if fl.DefValue == "" {
		return `""`
	}
	return fl.DefValue
}

// logLevel adds --log-level to f.
func (f *flags) logLevel() *slog.Level {
	level := new(slog.Level)
	f.fs.TextVar(level, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	return level
}

// newLogger logs text to w at level.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
