package cmdline

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

// Flags is one subcommand's flag set. A flag not given on the command
// line is read from its environment variable (see envName), if that is
// set and not empty, and else from the --config file, for a command that
// has one (see Config). Define flags on the embedded FlagSet; parse with
// Parse or ParseInterspersed, not the FlagSet's own Parse.
type Flags struct {
	*flag.FlagSet
	s      Streams
	about  string      // what the command does, for --help
	config *ConfigFile // nil: no --config
}

// NewFlags returns the flags of the command name, which does what about
// says (its --help shows it).
func NewFlags(s Streams, name, about string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors are reported by ExitStatus
	fs.Usage = func() {}
	return &Flags{FlagSet: fs, s: s, about: about}
}

// envName is the environment variable for a flag: --drain-timeout is
// MCPCANCEL_DRAIN_TIMEOUT.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then fills the flags they left out from the
// environment, and those still left from the --config file.
// --help prints the flags and returns flag.ErrHelp.
func (f *Flags) Parse(args []string) error {
	err := f.FlagSet.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.help(f.s.Stdout)
		return err
	case err != nil:
		return usageError{err}
	case f.FlagSet.NArg() > 0:
		return usageError{fmt.Errorf("unexpected argument %q", f.FlagSet.Arg(0))}
	}
	return f.fill()
}

// fill sets the flags the command line left out: from the environment
// first, then from the --config file.
func (f *Flags) fill() error {
	if err := f.fromEnv(os.LookupEnv); err != nil {
		return err
	}
	return f.fromFile()
}

// ParseInterspersed is Parse for a command with positional arguments,
// which may come before, between and after the flags; "--" ends the
// flags. It returns the positional arguments.
func (f *Flags) ParseInterspersed(args []string) ([]string, error) {
	var pos []string
	for {
		err := f.FlagSet.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			f.help(f.s.Stdout)
			return nil, err
		case err != nil:
			return nil, usageError{err}
		}
		rest := f.FlagSet.Args()
		if len(rest) == 0 {
			return pos, f.fill()
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), f.fill()
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func (f *Flags) fromEnv(lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	f.FlagSet.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var err error
	f.FlagSet.VisitAll(func(fl *flag.Flag) {
		v, ok := lookup(envName(fl.Name))
		if err != nil || given[fl.Name] || !ok || v == "" {
			return
		}
		if e := f.FlagSet.Set(fl.Name, v); e != nil {
			err = usageError{fmt.Errorf("%s=%q: invalid value for --%s: %v", envName(fl.Name), v, fl.Name, e)}
		}
	})
	return err
}

// help prints what the command does and every flag with its default and
// its environment variable.
func (f *Flags) help(w io.Writer) {
	fmt.Fprintf(w, "Usage: mcpcancel %s [flags]\n\n%s\n", f.FlagSet.Name(), f.about)
	hasFlags := false
	f.FlagSet.VisitAll(func(*flag.Flag) { hasFlags = true })
	if !hasFlags {
		return
	}
	if f.config != nil {
		fmt.Fprint(w, "\nFlags (the command line wins over the environment, and both over --config):\n")
	} else {
		fmt.Fprint(w, "\nFlags (the command line wins over the environment):\n")
	}
	f.FlagSet.VisitAll(func(fl *flag.Flag) {
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

// LogLevel adds --log-level to f.
func (f *Flags) LogLevel() *slog.Level {
	level := new(slog.Level)
	f.FlagSet.Var((*levelFlag)(level), "log-level", "log `level`: "+levelNames)
	return level
}

const levelNames = "debug, info, warn or error"

// levelFlag is a slog.Level named by one of levelNames; a wrong name is
// refused with the right ones.
type levelFlag slog.Level

func (l *levelFlag) String() string { return slog.Level(*l).String() }

func (l *levelFlag) Set(s string) error {
	for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		if strings.EqualFold(s, lv.String()) {
			*l = levelFlag(lv)
			return nil
		}
	}
	return fmt.Errorf("want %s", levelNames)
}

// NewLogger logs text to w at level.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
