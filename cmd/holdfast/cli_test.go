package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
)

// runCapture runs holdfast args in-process to the end.
func runCapture(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, errOut := runCapture(args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q; want 0 and nothing", args, code, errOut)
		}
		for _, want := range []string{"server", "relay", "Exit status", "-o json", "flags go before positional arguments"} {
			if !strings.Contains(strings.ToLower(out), strings.ToLower(want)) {
				t.Errorf("%q: the help does not say %q:\n%s", args, want, out)
			}
		}
		// -etcd is the reads' (history, get, diff): the writes go through
		// the server alone.
		for _, para := range strings.Split(out, "\n\n") {
			if strings.Contains(para, "-etcd") && (strings.Contains(para, "publish") || strings.Contains(para, "rollback")) {
				t.Errorf("%q: the help names -etcd beside publish or rollback:\n%s", args, para)
			}
		}
	}
}

// TestCommandHelp: `holdfast help NAME` and `holdfast NAME -h` print the
// same help, naming every flag, on stdout, with exit status 0.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands() {
		words := strings.Fields(c.name) // "rollout start": two
		code, viaHelp, errOut := runCapture(append([]string{"help"}, words...)...)
		if code != exitOK || errOut != "" {
			t.Errorf("help %s: exit %d, stderr %q", c.name, code, errOut)
		}
		code, viaFlag, errOut := runCapture(append(words, "-h")...)
		if code != exitOK || errOut != "" {
			t.Errorf("%s -h: exit %d, stderr %q", c.name, code, errOut)
		}
		if viaHelp != viaFlag {
			t.Errorf("help %s and %s -h differ:\n%s\n---\n%s", c.name, c.name, viaHelp, viaFlag)
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(viaHelp, "-"+f.Name+" ") && !strings.Contains(viaHelp, "-"+f.Name+"\t") {
				t.Errorf("help %s does not list -%s:\n%s", c.name, f.Name, viaHelp)
			}
		})
		if !strings.HasPrefix(viaHelp, "usage: holdfast "+c.name) {
			t.Errorf("help %s does not start with its synopsis:\n%s", c.name, viaHelp)
		}
	}
}

// TestUsageErrors: every usage error exits 2 with the reason on stderr,
// and prints nothing on stdout.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // on stderr
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "server", "relay"}, "usage: holdfast help [COMMAND]"},
		{[]string{"server", "-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"server", "-heartbeat", "soon"}, `invalid value "soon" for flag -heartbeat`},
		{[]string{"server", "-heartbeat", "0s"}, "-heartbeat must be positive"},
		{[]string{"server", "-memory", "-etcd", "127.0.0.1:2379"}, "-memory and -etcd exclude each other"},
		{[]string{"server", "-log-format", "xml"}, `invalid value "xml" for flag -log-format: must be text or json`},
		{[]string{"server", "extra"}, `takes no arguments, got ["extra"]`},
		// The flag package stops at the first argument: a flag after it
		// is refused, not taken as one more argument.
		{[]string{"server", "extra", "-addr", "127.0.0.1:0"}, "flag -addr after the arguments: flags go before positional arguments"},
		{[]string{"relay", "-upstream", "http://127.0.0.1:1"}, "-addr is required"},
		{[]string{"relay", "-addr", "127.0.0.1:0"}, "-upstream is required"},
		{[]string{"relay", "-addr", "127.0.0.1:0", "-upstream", "ftp://origin:21"}, `scheme must be http or https, got "ftp"`},
		{[]string{"relay", "-addr", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-store-tokens", "-open"}, "-store-tokens and -open: choose one"},
	} {
		code, out, errOut := runCapture(tc.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", tc.args, code, errOut)
		}
		if !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: stderr does not say %q:\n%s", tc.args, tc.want, errOut)
		}
		if out != "" {
			t.Errorf("%q: stdout %q, want nothing", tc.args, out)
		}
	}
}

// TestCheckArgs is the positional-argument rule of every command, on a
// command that takes one or two.
func TestCheckArgs(t *testing.T) {
	c := &command{name: "get", args: "NAMESPACE [KEY]", minArgs: 1, maxArgs: 2}
	for _, tc := range []struct {
		pos   []string
		ended bool // '--' ended the flags
		want  string
	}{
		{[]string{"payments.prod"}, false, ""},
		{[]string{"payments.prod", "retry-timeout-ms"}, false, ""},
		{nil, false, "missing arguments (want NAMESPACE [KEY])"},
		{[]string{"a", "b", "c"}, false, "too many arguments"},
		{[]string{"payments.prod", "-o", "json"}, false, "flag -o after the arguments"},
		{[]string{"payments.prod", "-dash-key"}, true, ""}, // after '--', an argument
		{[]string{"payments.prod", "-"}, false, ""},        // "-" is an argument (stdin, by custom)
	} {
		err := c.checkArgs(tc.pos, tc.ended)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q (ended %v): %v, want nil", tc.pos, tc.ended, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q (ended %v): %v, want %q", tc.pos, tc.ended, err, tc.want)
		case err != nil:
			if _, ok := err.(usageError); !ok {
				t.Errorf("%q: %T is not a usage error", tc.pos, err)
			}
		}
	}
}

// TestDoubleDash: after '--' a dash-led argument is an argument (here one
// too many for server, which takes none), not a flag after the arguments.
func TestDoubleDash(t *testing.T) {
	code, _, errOut := runCapture("server", "--", "-addr")
	if code != exitUsage || !strings.Contains(errOut, `takes no arguments, got ["-addr"]`) {
		t.Fatalf("server -- -addr: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestOperationFailure: a server that cannot start (its address taken)
// is a failed operation, exit 1 with the reason on stderr, not a usage
// error.
func TestOperationFailure(t *testing.T) {
	s := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-log-format", "json")
	rec := s.stderr.waitFor(t, "serving", s.done)
	taken := strings.TrimPrefix(rec["url"].(string), "http://")
	code, _, errOut := runCapture("server", "-memory", "-addr", taken)
	if code != exitFail || !strings.Contains(errOut, "address already in use") {
		t.Errorf("server on a taken address: exit %d, want 1; stderr:\n%s", code, errOut)
	}
	if strings.Contains(errOut, "usage:") {
		t.Errorf("a failed operation printed the usage:\n%s", errOut)
	}
	if code := s.stop(t); code != exitOK {
		t.Fatalf("the first server: exit %d\n%s", code, s.stderr.String())
	}
}
