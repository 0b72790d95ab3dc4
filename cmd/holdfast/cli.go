package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The exit statuses, the same for every subcommand, so that a script can
// branch on them.
const (
	exitOK    = 0 // success (a long-running command: stopped by SIGTERM or SIGINT)
	exitFail  = 1 // the server refused or failed the operation; its reason is on stderr
	exitUsage = 2 // unknown subcommand, bad flag or flag value, missing or extra argument
)

// env is what a subcommand writes to.
type env struct {
	stdout, stderr io.Writer
}

// A command is one subcommand. Adding one (publish, get, status, ...) is
// adding a func returning its *command to commands: it defines its flags
// on its own FlagSet in flags (an operator command adds -o with
// newChoice(fs, "o", "output", "text", "json")),
// gets its positional arguments after the flags, checked against minArgs
// and maxArgs, and returns nil (exit 0), a usageError (exit 2) or any
// other error, the server's reason (exit 1).
type command struct {
	name    string
	args    string // the positional arguments in the synopsis, e.g. "NAMESPACE [KEY]"; "" for none
	summary string // one line, for `holdfast help`
	doc     string // the text of `holdfast help NAME` between the synopsis and the flags

	minArgs, maxArgs int

	// flags defines the command's flags on fs and returns the function
	// that runs it, called once fs is parsed, with the positional
	// arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, e *env, args []string) error
}

// commands returns every subcommand, in the order of `holdfast help`. A
// name of two words ("rollout start") is a subcommand of a group: the
// group's word alone names no command.
func commands() []*command {
	return []*command{
		// "server export" and "server import" before "server", which
		// would take their words for arguments.
		serverExportCommand(), serverImportCommand(), serverCommand(), relayCommand(),
		publishCommand(), rollbackCommand(), historyCommand(), getCommand(), diffCommand(),
		statusCommand(), clientsCommand(), namespacesCommand(),
		rolloutStartCommand(), rolloutStatusCommand(), rolloutListCommand(), rolloutAbortCommand(), rolloutPromoteCommand(),
		schemaSetCommand(), schemaGetCommand(), schemaDeleteCommand(),
		tokenCreateCommand(), tokenListCommand(), tokenRevokeCommand(),
		lintSetCommand(), lintGetCommand(), lintListCommand(), lintDeleteCommand(), lintTestCommand(),
		changeProposeCommand(), changeShowCommand(), changeListCommand(), changeApproveCommand(), changeRejectCommand(),
		changeWithdrawCommand(), changeRebaseCommand(), changePublishCommand(), policyGetCommand(), policySetCommand(),
		versionCommand(),
	}
}

// lookup returns the command that args begin with, and how many of its
// words name it (1, or 2 in a group); nil if none.
func lookup(args []string) (*command, int) {
	for _, c := range commands() {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return c, len(words)
		}
	}
	return nil, 0
}

// group returns the commands of group name ("rollout"), none if it is no
// group.
func group(name string) []*command {
	var cs []*command
	for _, c := range commands() {
		if strings.HasPrefix(c.name, name+" ") {
			cs = append(cs, c)
		}
	}
	return cs
}

// printGroup lists the commands of a group.
func printGroup(w io.Writer, name string, cs []*command) {
	fmt.Fprintf(w, "usage: holdfast %s COMMAND [flags] [arguments]\n\nThe %s commands are:\n\n", name, name)
	printCommands(w, cs)
	fmt.Fprintf(w, "\nRun 'holdfast help %s COMMAND' for a command's flags.\n", name)
}

func printCommands(w io.Writer, cs []*command) {
	width := 0
	for _, c := range cs {
		width = max(width, len(c.name))
	}
	for _, c := range cs {
		fmt.Fprintf(w, "\t%-*s   %s\n", width, c.name, c.summary)
	}
}

// run runs the command line args (without the program name) and returns
// the exit status. ctx ends a long-running subcommand cleanly (main
// cancels it on SIGTERM and SIGINT).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return help(e, args[1:])
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	c, n := lookup(args)
	if c == nil {
		if cs := group(args[0]); cs != nil {
			if len(args) == 1 {
				fmt.Fprintf(stderr, "holdfast %s: missing command\n", args[0])
			} else {
				fmt.Fprintf(stderr, "holdfast %s: unknown command %q\n", args[0], args[1])
			}
			printGroup(stderr, args[0], cs)
			return exitUsage
		}
		fmt.Fprintf(stderr, "holdfast: unknown command %q\nRun 'holdfast help' for usage.\n", args[0])
		return exitUsage
	}
	return c.run(ctx, e, args[n:])
}

// help is `holdfast help [COMMAND]`.
func help(e *env, args []string) int {
	switch {
	case len(args) == 0:
		printUsage(e.stdout)
		return exitOK
	}
	c, n := lookup(args)
	switch {
	case c != nil && n == len(args):
		c.printHelp(e.stdout)
		return exitOK
	case c != nil || len(args) > 2:
		fmt.Fprintln(e.stderr, "usage: holdfast help [COMMAND]")
		return exitUsage
	}
	if cs := group(args[0]); cs != nil {
		if len(args) == 1 {
			printGroup(e.stdout, args[0], cs)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "holdfast help: unknown command %q\nRun 'holdfast help %s' for the list.\n", strings.Join(args, " "), args[0])
		return exitUsage
	}
	if len(args) > 1 {
		fmt.Fprintln(e.stderr, "usage: holdfast help [COMMAND]")
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "holdfast help: unknown command %q\nRun 'holdfast help' for the list.\n", args[0])
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `holdfast runs holdfast's reference server and its relay, and is the
operator's tool of a config plane: publish and roll back with an actor and
a reason, read who changed what and what was live when, roll out in stages.

Usage:

	holdfast COMMAND [flags] [arguments]

The commands are:

`)
	printCommands(w, commands())
	fmt.Fprint(w, `
The operator commands reach the holdfast server's control API with
-server URL (and -token-file FILE, $`+tokenEnv+` or -token TOKEN), or etcd with
-etcd HOST:PORT[,HOST:PORT...] (history, get, diff: the reads).

Flags go before positional arguments ('--' ends the flags). Output is
human-readable; a command that prints the API's data takes -o json for
its JSON as the API sends it.

Exit status: 0 on success (a server: stopped by SIGTERM or SIGINT);
1 when the server refuses or fails the operation, its reason on stderr;
2 on a usage error (unknown command, bad flag, missing argument).

Run 'holdfast help COMMAND' (or 'holdfast COMMAND -h') for a command's flags,
'holdfast version' (or 'holdfast -version') for the version.
`)
}

func (c *command) synopsis() string {
	s := "holdfast " + c.name + " [flags]"
	if c.args != "" {
		s += " " + c.args
	}
	return s
}

func (c *command) printHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", c.synopsis(), strings.TrimSpace(c.doc))
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.flags(fs)
	fmt.Fprint(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// run parses args (the command's flags, then its positional arguments)
// and runs c.
func (c *command) run(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("holdfast "+c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr) // the flag package's own error ("flag provided but not defined: -x")
	fs.Usage = func() {}   // printed below: -h prints the whole help on stdout
	runCmd := c.flags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp(e.stdout)
			return exitOK
		}
		c.printShortUsage(e.stderr)
		return exitUsage
	}
	pos := fs.Args()
	ended := len(args) > len(pos) && args[len(args)-len(pos)-1] == "--"
	if err := c.checkArgs(pos, ended); err != nil {
		fmt.Fprintf(e.stderr, "holdfast %s: %v\n", c.name, err)
		c.printShortUsage(e.stderr)
		return exitUsage
	}
	err := runCmd(ctx, e, pos)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(e.stderr, "holdfast %s: %v\n", c.name, err)
	if errors.As(err, new(usageError)) {
		c.printShortUsage(e.stderr)
		return exitUsage
	}
	return exitFail
}

func (c *command) printShortUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\nRun 'holdfast help %s' for details.\n", c.synopsis(), c.name)
}

// checkArgs checks the positional arguments. The flag package stops at the
// first non-flag, so a flag after a positional argument would silently be
// one more argument: it is refused, unless '--' ended the flags.
func (c *command) checkArgs(pos []string, flagsEnded bool) error {
	if !flagsEnded {
		for _, a := range pos {
			if len(a) > 1 && strings.HasPrefix(a, "-") {
				return usagef("flag %s after the arguments: flags go before positional arguments", a)
			}
		}
	}
	switch {
	case len(pos) > c.maxArgs && c.maxArgs == 0:
		return usagef("takes no arguments, got %q", pos)
	case len(pos) > c.maxArgs:
		return usagef("too many arguments (want %s), got %q", c.args, pos)
	case len(pos) < c.minArgs:
		return usagef("missing arguments (want %s)", c.args)
	}
	return nil
}

// usageError is a command line the command cannot run: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// choice is a flag.Value that takes one of a fixed set of words, so that
// a bad value is a usage error at parse time (-log-format, and the
// operator commands' -o).
type choice struct {
	value   string
	allowed []string
}

func newChoice(fs *flag.FlagSet, name, usage string, allowed ...string) *choice {
	c := &choice{value: allowed[0], allowed: allowed}
	fs.Var(c, name, fmt.Sprintf("%s: `%s`", usage, strings.Join(allowed, "|")))
	return c
}

func (c *choice) String() string { return c.value }

func (c *choice) Set(s string) error {
	for _, a := range c.allowed {
		if s == a {
			c.value = s
			return nil
		}
	}
	return fmt.Errorf("must be %s", strings.Join(c.allowed, " or "))
}

// list is a comma-separated flag value ("a,b,c"); empty items are dropped.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(s string) error {
	*l = (*l)[:0]
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}
