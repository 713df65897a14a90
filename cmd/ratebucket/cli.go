package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes of run.
const (
	exitOK      = 0
	exitFailure = 1 // the work failed: Redis unreachable, a file not written
	exitUsage   = 2 // the command line was wrong
)

// command is one subcommand: its name, a one-line summary for the overview,
// the help text printed by --help, and the function that runs it.
type command struct {
	name    string
	summary string
	// usage is the synopsis line, then a blank line, then the description
	// and examples; the flag defaults are printed after it.
	usage string
	// flags registers the subcommand's flags on fs and returns the
	// function that runs it once they are parsed; args are the positional
	// arguments left after the flags.
	flags func(fs *flag.FlagSet) func(ctx context.Context, env *env, args []string) error
}

// env is what a subcommand may touch of the outside world: its output
// streams. Subcommands never write to os.Stdout or os.Stderr directly, so
// tests can run them through run.
type env struct {
	stdout, stderr io.Writer
}

// commands lists the subcommands in the order the overview shows them.
var commands = []*command{playCommand, simCommand, demoCommand, inspectCommand, resetCommand, benchCommand}

// run executes the command line args (without the program name), writing
// to stdout and stderr, and returns the process exit code. SIGINT and
// SIGTERM cancel the running subcommand, which then shuts down cleanly.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

// runContext is run with a caller's context: the subcommand stops when ctx
// ends.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		overview(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				c.printHelp(stdout, c.newFlagSet())
				return exitOK
			}
		}
		overview(stdout)
		return exitOK
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "ratebucket: unknown command %q; run 'ratebucket help' for the list\n", name)
		return exitUsage
	}
	return c.exec(ctx, &env{stdout: stdout, stderr: stderr}, args[1:])
}

// lookup returns the subcommand called name, or nil.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// overview prints the list of subcommands.
func overview(w io.Writer) {
	fmt.Fprint(w, `ratebucket shows, measures and inspects token-bucket rate limiting.

Usage: ratebucket COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'ratebucket COMMAND --help' for a command's flags and examples.
Start with: go run ./cmd/ratebucket play (or sim, for tables)
`)
}

// newFlagSet returns a FlagSet for c that reports nothing itself: exec
// turns its errors into one line.
func (c *command) newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("ratebucket "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// printHelp writes c's usage text and its flags with their defaults,
// wrapped to 80 columns.
func (c *command) printHelp(w io.Writer, fs *flag.FlagSet) {
	c.flags(fs) // register, so the defaults can be printed
	fmt.Fprintf(w, "Usage: ratebucket %s\n\nFlags:\n", strings.TrimSpace(c.usage))
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		fmt.Fprintln(w, strings.TrimRight("  "+dash+f.Name+" "+typ, " "))
		switch def := f.DefValue; {
		case def == "" || def == "false" || def == "0" || def == "0s":
		case isString(f.Value):
			usage += fmt.Sprintf(" (default %q)", def)
		default:
			usage += " (default " + def + ")"
		}
		for _, line := range wrap(usage, 80-6) {
			fmt.Fprintf(w, "      %s\n", line)
		}
	})
}

// isString reports whether a flag holds a string, whose default is shown
// quoted.
func isString(v flag.Value) bool {
	g, ok := v.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(string)
	return ok
}

// wrap splits text into lines of at most width runes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len([]rune(line))+1+len([]rune(word)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// exec parses args and runs c, mapping errors to an exit code and one line
// on stderr.
func (c *command) exec(ctx context.Context, e *env, args []string) int {
	fs := c.newFlagSet()
	do := c.flags(fs)
	rest, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp(e.stdout, c.newFlagSet())
		return exitOK
	}
	if err == nil {
		err = do(ctx, e, rest)
	}
	if err == nil {
		return exitOK
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintf(e.stderr, "ratebucket %s: interrupted\n", c.name)
		return exitFailure
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "ratebucket %s: %s (see 'ratebucket %s --help')\n", c.name, oneLine(err), c.name)
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "ratebucket %s: %s\n", c.name, oneLine(err))
	return exitFailure
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (so "inspect KEY --redis URL" works as well as
// "inspect --redis URL KEY"), and returns the positional ones. Everything
// after "--" is positional. Errors are usageErrors.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{err}
		}
		left := fs.Args()
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), nil // Parse stopped at "--"
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// usageError marks an error in the command line (exit code 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// oneLine joins a multi-line error message into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
