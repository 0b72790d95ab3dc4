package main

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// TestDocsRun runs the commands of README.md and docs/*.md, so that a
// documented command that stops working fails a test.
//
// A fenced block is runnable when the line before its opening fence is
//
//	<!-- holdfast:run NAME -->
//
// (NAME is optional, "main" by default). The runnable blocks of one doc
// with the same NAME are one script, run in their order, in a directory of
// their own; each script is a testscript (github.com/rogpeppe/go-internal)
// translated from the blocks' shell. A block after
//
//	<!-- holdfast:file FILE NAME -->
//
// is not run: it is the content of FILE in script NAME's directory (a
// schema the commands read, say).
//
// The shell a runnable block may use, one command a line: words, quoted
// with '…' or "…" (no $ expansion), a line ending in \ continued on the
// next, # comments, `&&` and `;` between commands, `> FILE` for a command's
// standard output, a final `&` to run it in the background, and `kill %N`
// and `wait %N` of the N-th command run in the background. `holdfast` and
// `./holdfast` are the binary the test builds. A `holdfast server` or
// `holdfast relay` in the background is waited for until its /readyz
// answers 200 (an etcd until its /health does, a Prometheus its
// /-/ready), and at the script's end every holdfast still in the
// background gets SIGINT and must exit 0. Another program (etcd,
// prometheus) missing from PATH skips the script, saying so, except under
// CI=true, whose .ci/run installs them. Hosts and ports are rewritten from a fixed table
// (docPorts: 127.0.0.1:8080 and the others become free loopback ports,
// each script its own) and /var/… and /etc/… paths into the script's
// directory; any other host:port in a runnable block fails the test, as
// does a listener on every interface (`-addr :8080`), which the server
// refuses without TLS or -plaintext.
//
// Commands that need what CI does not have (machines at fixed addresses,
// certificates from a CA, the network) stay unmarked, and
// minRunnable says how many blocks each doc has marked at least, so that a
// marker lost in an edit fails the test too.
func TestDocsRun(t *testing.T) {
	root := repoRoot(t)
	bin := buildBinary(t)
	docs := readDocs(t, root)

	dir := t.TempDir()
	var files []string
	counts := map[string]int{}
	for _, d := range docs {
		scripts, n, err := docScripts(d)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.name] = n
		for _, s := range scripts {
			ports := map[int]int{}
			for _, p := range docPorts {
				ports[p] = testutil.LoopbackPort(t)
			}
			text, err := s.translate(ports)
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, s.fileName()+".txtar")
			if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	for name, least := range minRunnable {
		if counts[name] < least {
			t.Errorf("%s has %d runnable blocks, want at least %d (a <!-- holdfast:run --> marker lost?)", name, counts[name], least)
		}
	}
	if len(files) == 0 {
		t.Fatal("no runnable block in the docs")
	}
	testscript.Run(t, testscript.Params{
		Files: files,
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+env.Getenv("PATH"))
			env.Setenv("HOLDFAST_TOKEN", "")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitready": cmdWaitReady,
		},
	})
}

// minRunnable is how many runnable blocks each doc has at least.
var minRunnable = map[string]int{
	"README.md":        1,
	"docs/SERVER.md":   7,
	"docs/RELAY.md":    1,
	"docs/ROLLOUTS.md": 1,
}

// docPorts are the ports a runnable block may use, on 127.0.0.1 or
// localhost: each becomes a free loopback port of the script's own.
var docPorts = []int{8080, 8081, 8082, 8083, 8443, 8444, 9090, 9091, 2379, 2380}

// readyTimeout bounds the wait for a program in the background to be
// ready: generous, for a loaded CI machine running every package at once.
const readyTimeout = time.Minute

// cmdWaitReady is the script command `waitready URL`: it waits, up to
// readyTimeout, until GET URL answers 200.
func cmdWaitReady(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitready URL")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // a readiness probe: only the status counts
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var last string
	ok := testutil.Wait(readyTimeout, func() bool {
		resp, err := hc.Get(args[0])
		if err != nil {
			last = err.Error()
			return false
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		ts.Fatalf("%s not ready within %v: %s", args[0], readyTimeout, last)
	}
}

// A docScript is the runnable blocks of one doc with one name, and the
// files they read.
type docScript struct {
	doc, name string
	blocks    []docBlock
	files     []docFile
}

type docBlock struct {
	line int // the first line of the block's content, 1-based
	text []string
}

type docFile struct {
	name, text string
}

func (s *docScript) fileName() string {
	base := strings.TrimSuffix(path.Base(s.doc), ".md")
	if s.name != "main" {
		base += "-" + s.name
	}
	return base
}

var markerRE = regexp.MustCompile(`^<!--\s*holdfast:(run|file)\b\s*(.*?)\s*-->$`)

// docScripts gathers a doc's marked blocks into scripts, and counts its
// runnable blocks.
func docScripts(d *doc) ([]*docScript, int, error) {
	var scripts []*docScript
	byName := map[string]*docScript{}
	script := func(name string) *docScript {
		if s := byName[name]; s != nil {
			return s
		}
		s := &docScript{doc: d.name, name: name}
		byName[name] = s
		scripts = append(scripts, s)
		return s
	}
	runnable := 0
	for i := 0; i < len(d.lines); i++ {
		m := markerRE.FindStringSubmatch(strings.TrimSpace(d.lines[i]))
		if m == nil {
			if l := strings.TrimSpace(d.lines[i]); strings.HasPrefix(l, "<!--") && strings.Contains(l, "holdfast:") {
				return nil, 0, fmt.Errorf("%s: a marker not understood: %s", d.at(i+1), d.lines[i])
			}
			continue
		}
		if i+1 >= len(d.lines) || !strings.HasPrefix(strings.TrimSpace(d.lines[i+1]), "```") {
			return nil, 0, fmt.Errorf("%s: a holdfast:%s marker not followed by a fenced block", d.at(i+1), m[1])
		}
		start := i + 2
		end := start
		for end < len(d.lines) && !strings.HasPrefix(strings.TrimSpace(d.lines[end]), "```") {
			end++
		}
		if end == len(d.lines) {
			return nil, 0, fmt.Errorf("%s: a fenced block that does not end", d.at(i+2))
		}
		args := strings.Fields(m[2])
		switch m[1] {
		case "run":
			name := "main"
			if len(args) > 1 {
				return nil, 0, fmt.Errorf("%s: want <!-- holdfast:run [NAME] -->", d.at(i+1))
			} else if len(args) == 1 {
				name = args[0]
			}
			s := script(name)
			s.blocks = append(s.blocks, docBlock{line: start + 1, text: d.lines[start:end]})
			runnable++
		case "file":
			if len(args) < 1 || len(args) > 2 {
				return nil, 0, fmt.Errorf("%s: want <!-- holdfast:file FILE [NAME] -->", d.at(i+1))
			}
			name := "main"
			if len(args) == 2 {
				name = args[1]
			}
			s := script(name)
			s.files = append(s.files, docFile{name: args[0], text: strings.Join(d.lines[start:end], "\n") + "\n"})
		}
		i = end
	}
	for _, s := range scripts {
		if len(s.blocks) == 0 {
			return nil, 0, fmt.Errorf("%s: files for script %q, which has no runnable block", d.name, s.name)
		}
	}
	return scripts, runnable, nil
}

// translate writes the script as a testscript, with the doc's ports
// replaced by ports (doc port to real port).
func (s *docScript) translate(ports map[int]int) (string, error) {
	var b strings.Builder
	var jobs []*job
	dirs := map[string]bool{}
	needs := map[string]bool{}
	for _, blk := range s.blocks {
		for _, l := range joinContinued(blk) {
			at := fmt.Sprintf("%s:%d", s.doc, l.line)
			cmds, err := scriptCommands(l.text)
			if err != nil {
				return "", fmt.Errorf("%s: %v", at, err)
			}
			if len(cmds) == 0 {
				continue
			}
			fmt.Fprintf(&b, "# %s: %s\n", at, strings.TrimSpace(l.text))
			for _, c := range cmds {
				for i, w := range c.words {
					if c.words[i], err = rewriteWord(w, ports, dirs); err != nil {
						return "", fmt.Errorf("%s: %v", at, err)
					}
				}
				if c.stdout != "" {
					if c.stdout, err = rewriteWord(c.stdout, ports, dirs); err != nil {
						return "", fmt.Errorf("%s: %v", at, err)
					}
				}
				for _, d := range slices.Sorted(maps.Keys(dirs)) {
					fmt.Fprintf(&b, "mkdir %s\n", scriptQuote(d))
				}
				clear(dirs)
				line, err := c.script(&jobs)
				if err != nil {
					return "", fmt.Errorf("%s: %v", at, err)
				}
				if p := c.words[0]; p != "holdfast" && p != "./holdfast" && !scriptBuiltins[p] {
					needs[p] = true
				}
				b.WriteString(line)
			}
		}
	}
	b.WriteString("# the end: every holdfast in the background stops cleanly on SIGINT\n")
	for _, j := range slices.Backward(jobs) {
		if j.holdfast && !j.stopped {
			fmt.Fprintf(&b, "kill -INT %s\nwait %s\n", j.name, j.name)
		}
	}
	// Other programs (etcd) the script needs: their absence skips it,
	// saying so, except under CI=true, where it fails.
	var head strings.Builder
	for _, p := range slices.Sorted(maps.Keys(needs)) {
		if os.Getenv("CI") != "true" {
			fmt.Fprintf(&head, "[!exec:%s] skip 'no %s on PATH'\n", p, p)
		}
	}
	for _, f := range s.files {
		fmt.Fprintf(&b, "-- %s --\n%s", f.name, f.text)
	}
	return head.String() + b.String(), nil
}

// scriptBuiltins are the commands a runnable block may use that the
// script runs itself.
var scriptBuiltins = map[string]bool{"cd": true, "mkdir": true, "rm": true, "cp": true, "mv": true, "kill": true, "wait": true}

// A job is a command a script runs in the background.
type job struct {
	name     string // bgN, for the N-th: the shell's %N
	holdfast bool   // must stop cleanly on SIGINT (etcd dies of the signal)
	stopped  bool   // by the doc's own `kill %N`
}

type docLine struct {
	line int
	text string
}

// joinContinued joins a block's lines that end in a backslash with the
// next, as a shell reads them.
func joinContinued(blk docBlock) []docLine {
	var out []docLine
	for i := 0; i < len(blk.text); i++ {
		start, l := i, blk.text[i]
		for strings.HasSuffix(l, `\`) && i+1 < len(blk.text) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(blk.text[i])
		}
		out = append(out, docLine{line: blk.line + start, text: l})
	}
	return out
}

// A shellCmd is one command of a runnable line.
type shellCmd struct {
	words      []string
	stdout     string // > FILE
	background bool   // a final &
}

// scriptCommands splits a line of the shell a runnable block may use into its
// commands.
func scriptCommands(line string) ([]shellCmd, error) {
	var cmds []shellCmd
	var cur shellCmd
	var word strings.Builder
	inWord, redirect := false, false
	endWord := func() error {
		if !inWord {
			return nil
		}
		w := word.String()
		word.Reset()
		inWord = false
		if redirect {
			if cur.stdout != "" {
				return fmt.Errorf("two > redirections")
			}
			cur.stdout, redirect = w, false
			return nil
		}
		cur.words = append(cur.words, w)
		return nil
	}
	endCmd := func() error {
		if err := endWord(); err != nil {
			return err
		}
		if redirect {
			return fmt.Errorf("> without a file")
		}
		if len(cur.words) == 0 {
			if cur.stdout != "" || cur.background {
				return fmt.Errorf("an empty command")
			}
			return nil
		}
		cmds = append(cmds, cur)
		cur = shellCmd{}
		return nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		if cur.background && c != ' ' && c != '\t' && c != '#' {
			return nil, fmt.Errorf("& must end the line")
		}
		switch {
		case c == ' ' || c == '\t':
			if err := endWord(); err != nil {
				return nil, err
			}
		case c == '#' && !inWord:
			i = len(line)
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			word.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(line) {
					return nil, fmt.Errorf(`unterminated "`)
				}
				if line[i] == '"' {
					break
				}
				if line[i] == '$' || line[i] == '`' {
					return nil, fmt.Errorf("%q in a runnable block: no expansion is supported", line[i])
				}
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
				}
				word.WriteByte(line[i])
			}
		case c == '\\':
			if i+1 >= len(line) {
				return nil, fmt.Errorf("a backslash at the end of the line")
			}
			i++
			word.WriteByte(line[i])
			inWord = true
		case c == '&' && i+1 < len(line) && line[i+1] == '&', c == ';':
			if err := endCmd(); err != nil {
				return nil, err
			}
			if c == '&' {
				i++
			}
		case c == '&':
			if err := endWord(); err != nil {
				return nil, err
			}
			cur.background = true
		case c == '>':
			if err := endWord(); err != nil {
				return nil, err
			}
			redirect = true
		case strings.IndexByte("|<$`()*?[]{}~", c) >= 0 && !(inWord && strings.IndexByte("*?[]{}~", c) >= 0):
			return nil, fmt.Errorf("%q in a runnable block: not in the shell the docs' scripts use (quote it)", c)
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if err := endCmd(); err != nil {
		return nil, err
	}
	for _, c := range cmds[:max(len(cmds)-1, 0)] {
		if c.background {
			return nil, fmt.Errorf("& must end the line")
		}
	}
	return cmds, nil
}

// script is the command as testscript lines; jobs are the commands the
// script runs in the background so far.
func (c shellCmd) script(jobs *[]*job) (string, error) {
	words := slices.Clone(c.words)
	switch words[0] {
	case "./holdfast":
		words[0] = "holdfast"
	case "kill", "wait": // kill %N, wait %N: the shell's jobs
		if len(words) != 2 || !strings.HasPrefix(words[1], "%") || c.stdout != "" || c.background {
			return "", fmt.Errorf("only %s %%N of a job the block started", words[0])
		}
		n, err := strconv.Atoi(words[1][1:])
		if err != nil || n < 1 || n > len(*jobs) {
			return "", fmt.Errorf("%s %s: no such job", words[0], words[1])
		}
		j := (*jobs)[n-1]
		if j.stopped {
			return "", nil // the wait after a kill: done already
		}
		j.stopped = true
		if words[0] == "kill" {
			return fmt.Sprintf("kill -INT %s\nwait %s\n", j.name, j.name), nil
		}
		return fmt.Sprintf("wait %s\n", j.name), nil
	case "cd", "mkdir", "rm", "cp", "mv":
		if c.stdout != "" || c.background {
			return "", fmt.Errorf("%s with > or &", words[0])
		}
		if words[0] == "mkdir" && len(words) > 1 && words[1] == "-p" { // testscript's mkdir makes the parents
			words = slices.Delete(words, 1, 2)
		}
		return quoteAll(words) + "\n", nil
	}
	line := "exec " + quoteAll(words)
	var j *job
	if c.background {
		if c.stdout != "" {
			return "", fmt.Errorf("> and & together")
		}
		j = &job{name: fmt.Sprintf("bg%d", len(*jobs)+1), holdfast: words[0] == "holdfast"}
		*jobs = append(*jobs, j)
		line += " &" + j.name + "&"
	}
	line += "\n"
	if c.stdout != "" {
		line += "cp stdout " + scriptQuote(c.stdout) + "\n"
	}
	if j == nil {
		return line, nil
	}
	var ready string
	var err error
	switch {
	case words[0] == "holdfast" && len(words) > 1 && (words[1] == "server" || words[1] == "relay"):
		ready, err = readyURL(words[2:])
	case words[0] == "etcd":
		ready, err = flagURL(words[1:], "--advertise-client-urls", "", "/health")
	case words[0] == "prometheus":
		ready, err = flagURL(words[1:], "--web.listen-address", "http://", "/-/ready")
	}
	if err != nil {
		return "", err
	}
	if ready != "" {
		line += "waitready " + scriptQuote(ready) + "\n"
	}
	return line, nil
}

// flagURL is the URL of another program's readiness: the first value of
// its flag name (--name VALUE or --name=VALUE) between prefix and path.
func flagURL(args []string, name, prefix, path string) (string, error) {
	for i, a := range args {
		v, ok := strings.CutPrefix(a, name+"=")
		if a == name && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			v, _, _ = strings.Cut(v, ",")
			return prefix + v + path, nil
		}
	}
	return "", fmt.Errorf("a program in the background without %s, to wait until it is ready", name)
}

// readyURL is /readyz of a server's or relay's flags: on -admin-addr if
// it has one, else on -addr.
func readyURL(args []string) (string, error) {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			break
		}
		name = strings.TrimPrefix(name, "-")
		if k, v, ok := strings.Cut(name, "="); ok {
			flags[k] = v
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") { // else a boolean flag
			flags[name] = args[i+1]
			i++
		}
	}
	addr := flags["admin-addr"]
	if addr == "" {
		addr = flags["addr"]
	}
	if addr == "" {
		return "", fmt.Errorf("a server or relay in the background without -addr: its port must be one of the table's")
	}
	scheme := "http"
	if flags["tls-cert"] != "" { // every listener serves TLS then
		scheme = "https"
	}
	return scheme + "://" + addr + "/readyz", nil
}

var (
	loopbackRE = regexp.MustCompile(`\b(127\.0\.0\.1|localhost):([0-9]+)\b`)
	hostPortRE = regexp.MustCompile(`^(\[[0-9a-fA-F:.]*\]|[A-Za-z0-9.-]*):[0-9]+$`)
)

// rewriteWord puts the script's ports in place of the doc's and the
// script's directory in place of /var/lib and /etc, and refuses any other
// host; dirs collects the directories a rewritten path needs.
func rewriteWord(w string, ports map[int]int, dirs map[string]bool) (string, error) {
	var err error
	w = loopbackRE.ReplaceAllStringFunc(w, func(m string) string {
		sub := loopbackRE.FindStringSubmatch(m)
		p, _ := strconv.Atoi(sub[2])
		real, ok := ports[p]
		if !ok {
			err = fmt.Errorf("port %d is not in the table of the docs' ports %v", p, docPorts)
			return m
		}
		return fmt.Sprintf("127.0.0.1:%d", real)
	})
	if err != nil {
		return "", err
	}
	// The addresses: each item of a comma-separated list that is a URL
	// or a HOST:PORT.
	_, value, ok := strings.Cut(w, "=") // -addr=HOST:PORT
	if !ok || !strings.HasPrefix(w, "-") {
		value = w
	}
	for _, item := range strings.Split(value, ",") {
		if _, rest, ok := strings.Cut(item, "://"); ok {
			item, _, _ = strings.Cut(rest, "/")
		}
		m := hostPortRE.FindStringSubmatch(item)
		switch {
		case m == nil, m[1] == "127.0.0.1":
		case m[1] == "":
			return "", fmt.Errorf("%q listens on every interface: a runnable block uses loopback (127.0.0.1:PORT)", w)
		default:
			return "", fmt.Errorf("host %q in %q: a runnable block uses 127.0.0.1 or localhost", m[1], w)
		}
	}
	for _, prefix := range []string{"/var/", "/etc/"} {
		if rest, ok := strings.CutPrefix(w, prefix); ok {
			w = strings.TrimPrefix(prefix, "/") + rest
			dirs[path.Dir(w)] = true
		}
	}
	return w, nil
}

var plainWordRE = regexp.MustCompile(`^[A-Za-z0-9_./:=,+@%-]+$`)

func scriptQuote(w string) string {
	if plainWordRE.MatchString(w) {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", "''") + "'"
}

func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = scriptQuote(w)
	}
	return strings.Join(q, " ")
}

// TestDocsListenersServe checks every `holdfast server` and `holdfast
// relay` line of the docs, the help texts and the package doc, marked
// runnable or not: a listener off loopback needs -tls-cert or -plaintext,
// or the command refuses to start (which `-addr :8080` did in the docs).
func TestDocsListenersServe(t *testing.T) {
	docs := append(readDocs(t, repoRoot(t)), append(helpDocs(), packageDoc(t))...)
	n := 0
	for _, d := range docs {
		for _, s := range d.code {
			m := holdfastLineRE.FindStringSubmatch(s.text)
			if m == nil {
				continue
			}
			words := shellWords(m[1])
			if len(words) < 2 || (words[0] != "server" && words[0] != "relay") || !strings.HasPrefix(words[1], "-") {
				continue // not a server or relay (server export, server import), or no flags
			}
			n++
			if p := listenerProblem(words[1:]); p != "" {
				t.Errorf("%s: `%s`: %s", d.at(s.line), s.text, p)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no `holdfast server` or `holdfast relay` line in the docs")
	}
}

// listenerProblem says why a server's or relay's flags would not start
// it for its listeners' addresses, or "".
func listenerProblem(args []string) string {
	secure := slices.ContainsFunc(args, func(a string) bool {
		return a == "-plaintext" || a == "-tls-cert" || strings.HasPrefix(a, "-tls-cert=") || strings.HasPrefix(a, "-plaintext=")
	})
	for i, a := range args {
		if (a != "-addr" && a != "-admin-addr") || i+1 == len(args) {
			continue
		}
		host, _, ok := strings.Cut(args[i+1], ":")
		if !ok || secure || host == "127.0.0.1" || host == "localhost" || host == "[::1]" {
			continue
		}
		return fmt.Sprintf("%s %s is off loopback in plaintext: give it -tls-cert and -tls-key, or -plaintext behind a TLS balancer, or use 127.0.0.1", a, args[i+1])
	}
	return ""
}

// TestDocScriptTranslation: what a runnable block's line becomes, and
// what it may not use.
func TestDocScriptTranslation(t *testing.T) {
	ports := map[int]int{8080: 41000, 8081: 41001}
	for _, tc := range []struct{ line, want string }{
		{`holdfast server -memory -addr 127.0.0.1:8080 &   # a comment`,
			"exec holdfast server -memory -addr 127.0.0.1:41000 &bg1&\nwaitready http://127.0.0.1:41000/readyz\n"},
		{`./holdfast publish -server http://localhost:8080 -reason "it's \"quoted\"" ns.a k='a b'`,
			"exec holdfast publish -server http://127.0.0.1:41000 -reason 'it''s \"quoted\"' ns.a 'k=a b'\n"},
		{`holdfast token create -server http://127.0.0.1:8080 -token-file /etc/holdfast/admin.token -data '*' bot > bot.token`,
			"mkdir etc/holdfast\nexec holdfast token create -server http://127.0.0.1:41000 -token-file etc/holdfast/admin.token -data '*' bot\ncp stdout bot.token\n"},
		{`mkdir -p dir && holdfast version`, "mkdir dir\nexec holdfast version\n"},
		{`holdfast server -memory -addr 127.0.0.1:8080 -tls-cert c.pem -tls-key k.pem &`,
			"exec holdfast server -memory -addr 127.0.0.1:41000 -tls-cert c.pem -tls-key k.pem &bg1&\nwaitready https://127.0.0.1:41000/readyz\n"},
		{`holdfast server -memory -addr 127.0.0.1:8080 -admin-addr 127.0.0.1:8081 -tls-cert c.pem -tls-key k.pem &`,
			"exec holdfast server -memory -addr 127.0.0.1:41000 -admin-addr 127.0.0.1:41001 -tls-cert c.pem -tls-key k.pem &bg1&\nwaitready https://127.0.0.1:41001/readyz\n"},
		{`etcd --data-dir d --listen-client-urls http://127.0.0.1:8080 --advertise-client-urls http://127.0.0.1:8080 &`,
			"exec etcd --data-dir d --listen-client-urls http://127.0.0.1:41000 --advertise-client-urls http://127.0.0.1:41000 &bg1&\nwaitready http://127.0.0.1:41000/health\n"},
		{`holdfast relay -upstream http://127.0.0.1:8080,http://127.0.0.1:8081 -addr=127.0.0.1:8081 &`,
			"exec holdfast relay -upstream http://127.0.0.1:41000,http://127.0.0.1:41001 -addr=127.0.0.1:41001 &bg1&\nwaitready http://127.0.0.1:41001/readyz\n"},
	} {
		s := &docScript{doc: "d.md", name: "main", blocks: []docBlock{{line: 1, text: []string{tc.line}}}}
		got, err := s.translate(ports)
		if err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		got, _, _ = strings.Cut(got, "# the end: every holdfast") // the ending
		got = commandLines(got)
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.line, got, tc.want)
		}
	}
	for _, tc := range []struct{ line, want string }{
		{`holdfast server -memory -addr :8080 &`, "listens on every interface"},
		{`holdfast server -memory -addr=:8080 &`, "listens on every interface"},
		{`holdfast publish -server http://origin:8080 ns.a k=1`, `host "origin"`},
		{`holdfast publish -server http://127.0.0.1:7777 ns.a k=1`, "port 7777 is not in the table"},
		{`holdfast get -server http://127.0.0.1:8080 ns.a | head`, `'|'`},
		{`holdfast publish -server http://127.0.0.1:8080 -reason $WHY ns.a k=1`, `'$'`},
		{`holdfast publish -reason "why ns.a`, `unterminated "`},
		{`holdfast server -memory & holdfast version`, "& must end the line"},
		{`holdfast relay -upstream http://127.0.0.1:8080 &`, "without -addr"},
	} {
		s := &docScript{doc: "d.md", name: "main", blocks: []docBlock{{line: 1, text: []string{tc.line}}}}
		if _, err := s.translate(ports); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.line, err, tc.want)
		}
	}
	// A job the doc stops itself is not stopped again at the end.
	s := &docScript{doc: "d.md", name: "main", blocks: []docBlock{{line: 1, text: []string{
		`holdfast server -memory -addr 127.0.0.1:8080 &`, `kill %1 && wait %1`, `holdfast server -memory -addr 127.0.0.1:8080 &`}}}}
	got, err := s.translate(ports)
	if err != nil {
		t.Fatal(err)
	}
	if want := "exec holdfast server -memory -addr 127.0.0.1:41000 &bg1&\nwaitready http://127.0.0.1:41000/readyz\n" +
		"kill -INT bg1\nwait bg1\n" +
		"exec holdfast server -memory -addr 127.0.0.1:41000 &bg2&\nwaitready http://127.0.0.1:41000/readyz\n" +
		"kill -INT bg2\nwait bg2\n"; commandLines(got) != want {
		t.Errorf("kill %%1 && wait %%1:\n got %q\nwant %q", commandLines(got), want)
	}
	if p := listenerProblem([]string{"-addr", ":8080"}); p == "" {
		t.Error("-addr :8080 in plaintext passed")
	}
	if p := listenerProblem([]string{"-addr", ":8443", "-tls-cert", "c.pem", "-tls-key", "k.pem"}); p != "" {
		t.Errorf("-addr :8443 with TLS: %s", p)
	}
}

// commandLines drops a script's comments and conditions (the skip when a
// program is missing), to compare the commands.
func commandLines(script string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(script, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "[") {
			b.WriteString(l)
		}
	}
	return b.String()
}
