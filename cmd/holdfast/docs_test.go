package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsMatchTheCode reads README.md and docs/*.md and checks what they
// name against the code (and the flags and routes of the command's own
// help texts and package doc): each flag of a `holdfast` command exists on that
// command's FlagSet (as registered in commands), each /control/ and /sdk/
// route is registered by some handler (with the method the doc gives),
// each test, benchmark and fuzz target cited is a func of some _test.go
// (in the file or package the doc names beside it, if it names one), and
// each file or folder a link or a code span names exists, and each Go
// identifier of the repository's packages the code names
// (`relay.WithTokens`, `access.Tokens.AuthenticateRequest`) is declared.
// It reads files only: no network, no process.
func TestDocsMatchTheCode(t *testing.T) {
	root := repoRoot(t)
	docs := readDocs(t, root)
	files := readGo(t, root)
	helps := append(helpDocs(), packageDoc(t))
	t.Run("flags", func(t *testing.T) {
		for _, p := range checkFlags(append(docs, helps...)) {
			t.Error(p)
		}
	})
	t.Run("routes", func(t *testing.T) {
		routes := codeRoutes(files)
		if len(routes) == 0 {
			t.Fatal("found no route registered in the code")
		}
		for _, p := range checkRoutes(append(docs, helps...), routes) {
			t.Error(p)
		}
	})
	t.Run("tests", func(t *testing.T) {
		tests := codeTests(t, files)
		for _, p := range checkTestNames(docs, tests, root) {
			t.Error(p)
		}
		for _, p := range checkSuiteCases(docs, suiteCases(t, files)) {
			t.Error(p)
		}
		for _, p := range checkGoTestPatterns(docs, tests) {
			t.Error(p)
		}
	})
	t.Run("paths", func(t *testing.T) {
		for _, p := range checkPaths(docs, root) {
			t.Error(p)
		}
	})
	t.Run("identifiers", func(t *testing.T) {
		for _, p := range checkIdentifiers(t, docs, files) {
			t.Error(p)
		}
	})
}

// repoRoot is the repository's root: two levels above this package, where
// go.work is.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("no go.work at the repository's root %s: %v", root, err)
	}
	return root
}

// A doc is one markdown file, split into what is code (fenced and indented
// blocks, inline spans) and the whole text.
type doc struct {
	name  string   // relative to the repository's root, e.g. "docs/SERVER.md"
	lines []string // the whole text
	code  []snippet
}

// A snippet is a line of a code block or an inline code span, with the
// line it starts on (1-based).
type snippet struct {
	line int
	text string
	span bool // an inline span, not a block's line
}

func (d *doc) at(line int) string { return fmt.Sprintf("%s:%d", d.name, line) }

func readDocs(t *testing.T, root string) []*doc {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names = append([]string{filepath.Join(root, "README.md")}, names...)
	var docs []*doc
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, name)
		docs = append(docs, parseDoc(filepath.ToSlash(rel), string(data)))
	}
	return docs
}

// helpDocs are the texts of `holdfast help COMMAND`, each of whose lines
// may be a command line.
func helpDocs() []*doc {
	var docs []*doc
	for _, c := range commands() {
		d := &doc{name: "holdfast help " + c.name, lines: strings.Split(c.doc, "\n")}
		for i, l := range d.lines {
			d.code = append(d.code, snippet{line: i + 1, text: strings.TrimSpace(l)})
		}
		docs = append(docs, d)
	}
	return docs
}

// packageDoc is this command's package comment (main.go), each of whose
// lines may be a command line.
func packageDoc(t *testing.T) *doc {
	t.Helper()
	data, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	d := &doc{name: "cmd/holdfast/main.go"}
	for i, l := range strings.Split(string(data), "\n") {
		text, ok := strings.CutPrefix(l, "//")
		if !ok {
			break
		}
		d.lines = append(d.lines, text)
		d.code = append(d.code, snippet{line: i + 1, text: strings.TrimSpace(text)})
	}
	return d
}

// spanRE is an inline code span of single backticks, which may wrap onto
// the next line but not across a paragraph.
var spanRE = regexp.MustCompile("`([^`]+)`")

// parseDoc splits a markdown text into its code: each line of a fenced or
// indented block (a block's line ending in a backslash joins the next, as
// a shell reads it), and each inline span of the other lines.
func parseDoc(name, text string) *doc {
	d := &doc{name: name, lines: strings.Split(text, "\n")}
	prose := make([]string, len(d.lines)) // the lines outside blocks; blocks blanked
	fenced, indented := false, false
	for i := 0; i < len(d.lines); i++ {
		l := d.lines[i]
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			fenced = !fenced
			continue
		case fenced:
		case (strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")) && trimmed != "" &&
			(indented || i == 0 || strings.TrimSpace(d.lines[i-1]) == ""):
			indented = true
		default:
			indented = false
			prose[i] = l
			continue
		}
		start := i
		for strings.HasSuffix(l, `\`) && i+1 < len(d.lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(d.lines[i])
		}
		d.code = append(d.code, snippet{line: start + 1, text: strings.TrimSpace(l)})
	}
	// Spans, paragraph by paragraph, so that one missing backtick cannot
	// pair spans across the rest of the file.
	for i := 0; i < len(prose); {
		if strings.TrimSpace(prose[i]) == "" {
			i++
			continue
		}
		j := i
		for j < len(prose) && strings.TrimSpace(prose[j]) != "" {
			j++
		}
		para := strings.Join(prose[i:j], "\n")
		for _, m := range spanRE.FindAllStringSubmatchIndex(para, -1) {
			line := i + 1 + strings.Count(para[:m[0]], "\n")
			text := strings.Join(strings.Fields(para[m[2]:m[3]]), " ")
			d.code = append(d.code, snippet{line: line, text: text, span: true})
		}
		i = j
	}
	return d
}

// otherFlags are flags the docs name alone, in a span, that belong to
// other programs: the go command's, and the prometheus example's.
var otherFlags = map[string]string{
	"race":      "go test",
	"bench":     "go test",
	"benchtime": "go test",
	"run":       "go test",
	"count":     "go test",
	"tags":      "go test",
	"once":      "examples/prometheus",
	"buildvcs":  "go build",
}

// topFlags are the flags of holdfast itself, before any command (run):
// each names a command.
var topFlags = map[string]string{"h": "help", "help": "help", "version": "version"}

// holdfastLineRE is a command line of the holdfast command: "holdfast" (or
// "./holdfast", or a path ending in it) at its start, and the rest.
var holdfastLineRE = regexp.MustCompile(`^(?:\$ )?(?:\S*/)?holdfast\s+(.*)$`)

// flagRE is a flag token: -name or --name, maybe with =value. holdfast's
// flags are lower case; "-Inf" is a number.
var flagRE = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)(?:=.*)?$`)

// checkFlags checks every holdfast command line in the docs' code (its
// command must exist and take each flag given to it), and every span that
// is a flag alone ("-data-dir DIR"): some command must take it.
func checkFlags(docs []*doc) []string {
	cmds := map[string]map[string]bool{} // command name: its flags
	groups := map[string]bool{}
	all := map[string]bool{} // every command's
	for _, c := range commands() {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		names := map[string]bool{"h": true, "help": true} // the flag package's own
		fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true; all[f.Name] = true })
		cmds[c.name] = names
		if w := strings.Fields(c.name); len(w) > 1 {
			groups[w[0]] = true
		}
	}
	for f, c := range topFlags { // "holdfast version # or -version"
		if cmds[c] != nil {
			cmds[c][f] = true
		}
		all[f] = true
	}
	var problems []string
	for _, d := range docs {
		for _, s := range d.code {
			if m := holdfastLineRE.FindStringSubmatch(s.text); m != nil {
				problems = append(problems, checkCommandLine(d, s, m[1], cmds, groups)...)
				continue
			}
			if !s.span || !strings.HasPrefix(s.text, "-") || strings.HasPrefix(s.text, "--") {
				continue // holdfast's flags are written -name; --name is etcd's
			}
			f := flagRE.FindStringSubmatch(strings.Fields(s.text)[0])
			if f == nil || all[f[1]] || otherFlags[f[1]] != "" {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s: `%s`: no holdfast command has a flag -%s", d.at(s.line), s.text, f[1]))
		}
	}
	return problems
}

// checkCommandLine checks one command line, args what follows
// "holdfast". Its first words name a command (words separated by | name
// several: "rollback|history|get"); the flags are the line's tokens up to
// a shell operator (| > ; &&), comments included ("# or -memory").
func checkCommandLine(d *doc, s snippet, args string, cmds map[string]map[string]bool, groups map[string]bool) []string {
	words := strings.Fields(args)
	if len(words) == 0 || words[0] == "help" || words[0] == "COMMAND" || words[0] == "CMD" {
		return nil
	}
	if f := flagRE.FindStringSubmatch(words[0]); f != nil && topFlags[f[1]] != "" {
		words[0] = topFlags[f[1]] // "holdfast -version -o json" is "holdfast version -o json"
		if words[0] == "help" {
			return nil
		}
	}
	var names []string
	rest := words[1:]
	if len(words) > 1 && groups[words[0]] && !strings.HasPrefix(words[1], "-") {
		// "rollout start", "schema set|get": a command of the group, or
		// words of the group itself ("rollout …").
		for _, w := range strings.Split(words[1], "|") {
			if _, ok := cmds[words[0]+" "+w]; ok || w == "…" || w == "..." {
				names = append(names, words[0]+" "+w)
			}
		}
		if len(names) > 0 {
			rest = words[2:]
		}
	}
	if names == nil {
		names = strings.Split(words[0], "|")
		if _, ok := cmds[words[0]]; !ok && groups[words[0]] {
			what := fmt.Sprintf("%q is a group of commands", "holdfast "+words[0])
			if len(words) > 1 && !strings.HasPrefix(words[1], "-") {
				what = fmt.Sprintf("no command %q", "holdfast "+words[0]+" "+words[1])
			}
			return []string{fmt.Sprintf("%s: `%s`: %s; the group's: %s", d.at(s.line), s.text, what, groupList(cmds, words[0]))}
		}
	}
	var problems []string
	for _, name := range names {
		if strings.HasSuffix(name, "…") || strings.HasSuffix(name, "...") {
			continue
		}
		flags, ok := cmds[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: `%s`: no command %q", d.at(s.line), s.text, "holdfast "+name))
			continue
		}
		for _, w := range rest {
			if w == "|" || w == ">" || w == ";" || w == "&&" || w == "--" {
				break
			}
			f := flagRE.FindStringSubmatch(strings.TrimRight(w, ",.)"))
			if f != nil && !flags[f[1]] {
				problems = append(problems, fmt.Sprintf("%s: `%s`: holdfast %s has no flag -%s", d.at(s.line), s.text, name, f[1]))
			}
		}
	}
	return problems
}

func groupList(cmds map[string]map[string]bool, group string) string {
	var names []string
	for name := range cmds {
		if strings.HasPrefix(name, group+" ") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// A route is a path pattern a handler registers ("/control/namespaces/{ns}/publish"),
// with its method if the registration names one.
type route struct {
	method, pattern string
}

var (
	// routeLitRE is a string literal of a route: "METHOD /path" or "/path".
	routeLitRE = regexp.MustCompile(`"(?:(GET|POST|PUT|DELETE|PATCH|HEAD) )?(/(?:control|sdk)/[^"\s?]*)`)
	// methodPathRE is a method and a path given apart, as a route table's
	// fields: "GET", "/sdk/x" or Method: "GET", Path: "/sdk/x" or
	// {"GET", transport.PathSnapshot, ...}.
	methodPathRE = regexp.MustCompile(`(?:"(GET|POST|PUT|DELETE|PATCH|HEAD)"|http\.Method(Get|Post|Put|Delete|Patch|Head)),\s*(?:\w+:\s*)?(?:"(/[^"]*)"|(?:\w+\.)?(Path\w+))`)
	// pathConstRE is a path constant's declaration: PathSnapshot = "/sdk/snapshot".
	pathConstRE = regexp.MustCompile(`\b(Path\w+)\s*=\s*"(/[^"]*)"`)
)

// codeRoutes collects the routes the repository's non-test Go files
// register. The handlers are read as text, not run: the patterns are what
// the docs name, wherever a handler is declared.
func codeRoutes(files []goFile) []route {
	var srcs []string
	consts := map[string]string{}
	for _, f := range files {
		if f.test {
			continue
		}
		srcs = append(srcs, f.src)
		for _, m := range pathConstRE.FindAllStringSubmatch(f.src, -1) {
			consts[m[1]] = m[2]
		}
	}
	var routes []route
	for _, src := range srcs {
		for _, m := range routeLitRE.FindAllStringSubmatch(src, -1) {
			routes = append(routes, route{m[1], m[2]})
		}
		for _, m := range methodPathRE.FindAllStringSubmatch(src, -1) {
			method := m[1]
			if method == "" {
				method = strings.ToUpper(m[2])
			}
			path := m[3]
			if path == "" {
				path = consts[m[4]]
			}
			if strings.HasPrefix(path, "/control/") || strings.HasPrefix(path, "/sdk/") {
				routes = append(routes, route{method, path})
			}
		}
	}
	return routes
}

// docRouteRE is a route in a doc: maybe a method, then /control/... or
// /sdk/..., ending at a space, a query, a quote or punctuation.
var docRouteRE = regexp.MustCompile("(?:^|[\\s`(\\[\"'])(?:(GET|POST|PUT|DELETE|PATCH|HEAD) )?(/(?:control|sdk)(?:/[^\\s`)\\]?#,;\"'|]*)?)")

// checkRoutes checks each route the docs name, in prose or code, against
// the routes of the code. A path ending in "/", "*", "…" or "..." names
// the routes under it: some must exist. A doc's placeholder segment
// ({ns}, NS, N) matches a pattern's wildcard; a literal segment matches a
// wildcard or itself.
func checkRoutes(docs []*doc, routes []route) []string {
	var problems []string
	for _, d := range docs {
		for i, l := range d.lines {
			for _, m := range docRouteRE.FindAllStringSubmatch(l, -1) {
				method, path := m[1], strings.TrimRight(m[2], ".:")
				if p := routeProblem(method, path, routes); p != "" {
					problems = append(problems, fmt.Sprintf("%s: %s", d.at(i+1), p))
				}
			}
		}
	}
	return problems
}

func routeProblem(method, path string, routes []route) string {
	named := strings.TrimSpace(method + " " + path)
	for _, suffix := range []string{"…", "...", "*"} {
		if strings.HasSuffix(path, suffix) {
			path = strings.TrimSuffix(path, suffix)
			for _, r := range routes {
				if !strings.HasSuffix(r.pattern, "/") && strings.HasPrefix(r.pattern, trimWild(path)) {
					return ""
				}
			}
			return fmt.Sprintf("%s: no route begins so", named)
		}
	}
	if path == "/control" || path == "/sdk" || strings.HasSuffix(path, "/") {
		for _, r := range routes {
			if !strings.HasSuffix(r.pattern, "/") && strings.HasPrefix(r.pattern, strings.TrimSuffix(path, "/")+"/") {
				return ""
			}
		}
		return fmt.Sprintf("%s: no route under it", named)
	}
	var methods []string // of the routes that match the path
	methodless := false
	for _, r := range routes {
		if strings.HasSuffix(r.pattern, "/") || !pathMatches(path, r.pattern) {
			continue
		}
		if r.method == "" {
			methodless = true
		} else if !slices.Contains(methods, r.method) {
			methods = append(methods, r.method)
		}
	}
	switch {
	case len(methods) == 0 && !methodless:
		return fmt.Sprintf("%s: no such route in the code", named)
	case method == "" || slices.Contains(methods, method) || len(methods) == 0:
		return ""
	}
	slices.Sort(methods)
	return fmt.Sprintf("%s: the route takes %s, not %s", named, strings.Join(methods, ", "), method)
}

// trimWild drops a trailing placeholder segment's start ("/x/{"), so that
// a prefix ending inside one still matches.
func trimWild(path string) string {
	if i := strings.LastIndex(path, "{"); i > strings.LastIndex(path, "}") {
		return path[:i]
	}
	return path
}

// placeholderRE is a doc's placeholder segment: {ns}, NS, N, ID.
var placeholderRE = regexp.MustCompile(`^(\{[^}]*\}|[A-Z][A-Z0-9_]*)$`)

func pathMatches(path, pattern string) bool {
	ps, qs := strings.Split(path, "/"), strings.Split(pattern, "/")
	if len(ps) != len(qs) {
		return false
	}
	for i := range ps {
		wild := strings.HasPrefix(qs[i], "{") && strings.HasSuffix(qs[i], "}")
		switch {
		case ps[i] == qs[i]:
		case wild:
		case placeholderRE.MatchString(ps[i]):
			return false // a placeholder where the route has a fixed word
		default:
			return false
		}
	}
	return true
}

// testFuncNameRE is the name of a test func.
var testFuncNameRE = regexp.MustCompile(`^(?:Test|Benchmark|Fuzz|Example)[A-Z0-9_]`)

// testFuncRE is a test, benchmark, fuzz target or example declared in a
// _test.go file.
var testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)

// codeTests maps each test func of the repository to the _test.go files
// (relative to root) that declare it.
func codeTests(t *testing.T, files []goFile) map[string][]string {
	t.Helper()
	tests := map[string][]string{}
	for _, f := range files {
		if !f.test {
			continue
		}
		for _, m := range testFuncRE.FindAllStringSubmatch(f.src, -1) {
			tests[m[1]] = append(tests[m[1]], f.path)
		}
	}
	if len(tests) == 0 {
		t.Fatal("found no test func in the repository")
	}
	return tests
}

var (
	// docTestRE is a test named in a doc, and what follows it: a
	// parenthesis that begins with a file or a package says where it is,
	// as in "TestNoTornReads (config/e2e_test.go)".
	docTestRE = regexp.MustCompile("\\b((?:Test|Benchmark|Fuzz|Example)[A-Z0-9_]\\w*)`?(?: \\(([^),:; ]+)[),:; ])?")
)

// checkTestNames checks each test, benchmark or fuzz target the docs name:
// it must be declared in some _test.go; if a parenthesis after it names a
// file or package ("(config/e2e_test.go)", "(internal/cachedir)"), in that
// one.
func checkTestNames(docs []*doc, tests map[string][]string, root string) []string {
	var problems []string
	for _, d := range docs {
		text := strings.Join(d.lines, "\n")
		for _, m := range docTestRE.FindAllStringSubmatchIndex(text, -1) {
			line := 1 + strings.Count(text[:m[0]], "\n")
			name := text[m[2]:m[3]]
			files := tests[name]
			if len(files) == 0 {
				problems = append(problems, fmt.Sprintf("%s: %s: no such func in any _test.go", d.at(line), name))
				continue
			}
			if m[4] < 0 {
				continue
			}
			where := text[m[4]:m[5]]
			if !strings.Contains(where, "/") && !strings.HasSuffix(where, ".go") && !isDir(filepath.Join(root, where)) {
				continue // words, not a place: "(reads with the server down)"
			}
			if !slices.ContainsFunc(files, func(f string) bool { return f == where || filepath.ToSlash(filepath.Dir(f)) == where }) {
				problems = append(problems, fmt.Sprintf("%s: %s is said to be in %s; it is in %s", d.at(line), name, where, strings.Join(files, ", ")))
			}
		}
	}
	return problems
}

// suiteDir is the SDK's end-to-end suite, whose cases the docs cite by
// their subtest names: "`NoTornReads` (internal/sdksuite)".
const suiteDir = "internal/sdksuite"

var (
	// suiteCasesRE is a list of the suite's cases cited in a doc:
	// "`A`, `B` (internal/sdksuite)".
	suiteCasesRE = regexp.MustCompile("((?:`[A-Z]\\w*`, )*`[A-Z]\\w*`) \\(" + regexp.QuoteMeta(suiteDir) + "[),:; ]")
	// nameSpanRE is one name of such a list.
	nameSpanRE = regexp.MustCompile("`(\\w+)`")
	// quotedNameRE is a string literal that may name a subtest.
	quotedNameRE = regexp.MustCompile(`"([A-Z]\w*)"`)
)

// suiteCases returns the names the suite's Go files quote: its cases'
// names are among them.
func suiteCases(t *testing.T, files []goFile) map[string]bool {
	t.Helper()
	cases := map[string]bool{}
	for _, f := range files {
		if !strings.HasPrefix(f.path, suiteDir+"/") {
			continue
		}
		for _, m := range quotedNameRE.FindAllStringSubmatch(f.src, -1) {
			cases[m[1]] = true
		}
	}
	if len(cases) == 0 {
		t.Fatalf("found no case in %s", suiteDir)
	}
	return cases
}

// checkSuiteCases checks each case of the suite the docs cite.
func checkSuiteCases(docs []*doc, cases map[string]bool) []string {
	var problems []string
	for _, d := range docs {
		text := strings.Join(d.lines, "\n")
		for _, m := range suiteCasesRE.FindAllStringSubmatchIndex(text, -1) {
			line := 1 + strings.Count(text[:m[0]], "\n")
			for _, n := range nameSpanRE.FindAllStringSubmatch(text[m[2]:m[3]], -1) {
				if !cases[n[1]] && !testFuncNameRE.MatchString(n[1]) { // a func: checked as one
					problems = append(problems, fmt.Sprintf("%s: %s: no such case in %s", d.at(line), n[1], suiteDir))
				}
			}
		}
	}
	return problems
}

// goTestRE is a go test command in a doc's code, maybe after "cd DIR &&".
var goTestRE = regexp.MustCompile(`(?:\bcd (\S+) && )?(?:\w+=\S* )*go test (.*)`)

// checkGoTestPatterns checks the -run and -bench patterns of each go test
// command the docs give: each alternative of a pattern's first level
// ("A|B" of "A|B/sub") matches a test (-run) or benchmark (-bench) of the
// packages the command names. "^$", which runs nothing, is not checked.
func checkGoTestPatterns(docs []*doc, tests map[string][]string) []string {
	var problems []string
	for _, d := range docs {
		for _, s := range d.code {
			m := goTestRE.FindStringSubmatch(s.text)
			if m == nil {
				continue
			}
			args := shellWords(m[2])
			var pkgs []string // folders from the root; "" for all
			patterns := map[string]string{}
			for i := 0; i < len(args); i++ {
				a := args[i]
				switch {
				case a == "&&" || a == ";" || a == "|":
					i = len(args)
				case a == "-run" || a == "-bench":
					if i+1 < len(args) {
						patterns[a] = args[i+1]
						i++
					}
				case strings.HasPrefix(a, "-run=") || strings.HasPrefix(a, "-bench="):
					flag, v, _ := strings.Cut(a, "=")
					patterns[flag] = v
				case a == "." || strings.HasPrefix(a, "./"):
					dir := filepath.ToSlash(filepath.Join(m[1], a))
					if strings.HasSuffix(a, "...") {
						dir = "" // every package (under a folder: near enough)
					}
					pkgs = append(pkgs, dir)
				}
			}
			for flag, prefix := range map[string]string{"-run": "Test", "-bench": "Benchmark"} {
				pattern, ok := patterns[flag]
				if !ok || pattern == "^$" {
					continue
				}
				first, _, _ := strings.Cut(pattern, "/")
				for _, alt := range strings.Split(first, "|") {
					re, err := regexp.Compile(alt)
					if err != nil {
						problems = append(problems, fmt.Sprintf("%s: `%s`: %s %q: %v", d.at(s.line), s.text, flag, alt, err))
						continue
					}
					if !matchesTest(re, prefix, pkgs, tests) {
						problems = append(problems, fmt.Sprintf("%s: `%s`: %s %q matches no %s func in %s", d.at(s.line), s.text, flag, alt, prefix, strings.Join(pkgs, ", ")))
					}
				}
			}
		}
	}
	return problems
}

// matchesTest says whether re matches a func of the kind prefix names
// (Test, Benchmark) declared in one of the folders pkgs ("" for any).
func matchesTest(re *regexp.Regexp, prefix string, pkgs []string, tests map[string][]string) bool {
	for name, files := range tests {
		if !strings.HasPrefix(name, prefix) || !re.MatchString(name) {
			continue
		}
		for _, f := range files {
			dir := filepath.ToSlash(filepath.Dir(f))
			if len(pkgs) == 0 || slices.ContainsFunc(pkgs, func(p string) bool { return p == "" || p == dir }) {
				return true
			}
		}
	}
	return false
}

// shellWords splits a command line as a shell would, for the quoting the
// docs use: single and double quotes, no escapes.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// A goFile is one .go file of the repository.
type goFile struct {
	path string // from the root, e.g. "config/e2e_test.go"
	test bool   // a _test.go
	src  string
}

// readGo reads every .go file under root, but for hidden folders and
// testdata.
func readGo(t *testing.T, root string) []goFile {
	t.Helper()
	var files []goFile
	err := filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if path != root && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, goFile{path: filepath.ToSlash(rel), test: strings.HasSuffix(path, "_test.go"), src: string(data)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	// linkRE is a markdown link's target.
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// filePathRE is a code span that names a file of the repository by
	// its path from the root: config/alloc_test.go.
	filePathRE = regexp.MustCompile(`^[a-z][\w.-]*(?:/[\w.-]+)+\.(?:go|md|json|ya?ml|mod)$`)
	// dirPathRE is a code span that may name a folder of the repository
	// (internal/gate), if its first element is one of the root's.
	dirPathRE = regexp.MustCompile(`^([a-z][\w-]*)(?:/[\w-]+)+/?$`)
)

// checkPaths checks that each relative link of the docs (from the doc's
// folder) and each code span that is a file's path (from the repository's
// root) names a file or folder that exists.
func checkPaths(docs []*doc, root string) []string {
	var problems []string
	for _, d := range docs {
		for i, l := range d.lines {
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.Dir(d.name), target)); err != nil {
					problems = append(problems, fmt.Sprintf("%s: link to %s: no such file", d.at(i+1), m[1]))
				}
			}
		}
		for _, s := range d.code {
			if !s.span {
				continue
			}
			m := dirPathRE.FindStringSubmatch(s.text)
			if !filePathRE.MatchString(s.text) && (m == nil || !isDir(filepath.Join(root, m[1]))) {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, s.text)); err != nil {
				problems = append(problems, fmt.Sprintf("%s: `%s`: no such file or folder", d.at(s.line), s.text))
			}
		}
	}
	return problems
}

// identRE is a qualified Go identifier in a doc's code: pkg.Name, or
// pkg.Type.Member.
var identRE = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?(\*?)`)

// packageRE is a Go file's package clause.
var packageRE = regexp.MustCompile(`(?m)^package (\w+)`)

// checkIdentifiers checks each pkg.Name (or pkg.Type.Member) in the docs'
// code whose pkg is the name of one of the repository's packages (not
// main): one package of that name must declare Name (Type, with its
// method or field Member).
func checkIdentifiers(t *testing.T, docs []*doc, files []goFile) []string {
	t.Helper()
	decls := map[string]map[string]bool{} // package name: its declarations, "Name" and "Type.Member"
	for _, file := range files {
		m := packageRE.FindStringSubmatch(file.src)
		if file.test || m == nil || m[1] == "main" {
			continue
		}
		names := decls[m[1]]
		if names == nil {
			names = map[string]bool{}
			decls[m[1]] = names
		}
		f, err := parser.ParseFile(token.NewFileSet(), file.path, file.src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", file.path, err)
		}
		addDecls(f, names)
	}
	var problems []string
	for _, d := range docs {
		for _, s := range d.code {
			for _, m := range identRE.FindAllStringSubmatch(s.text, -1) {
				names, ok := decls[m[1]]
				if !ok || m[4] != "" {
					continue // not a package of the repository (http.Handler), or a pattern (transport.Default*)
				}
				name := m[2]
				if m[3] != "" && names[m[2]+"."+m[3]] {
					continue
				}
				if !names[name] {
					problems = append(problems, fmt.Sprintf("%s: `%s`: package %s declares no %s", d.at(s.line), s.text, m[1], name))
				} else if m[3] != "" && !names[name+"."+m[3]] && isTypeName(names, name) {
					problems = append(problems, fmt.Sprintf("%s: `%s`: %s.%s has no method or field %s", d.at(s.line), s.text, m[1], name, m[3]))
				}
			}
		}
	}
	return problems
}

// addDecls adds a file's top-level declarations to names: functions,
// types, variables and constants by name, and each type's methods, struct
// fields and interface methods as "Type.Member". A type is also marked
// "Type." so that a member of it can be told from a value's (pkg.Var.Field).
func addDecls(f *ast.File, names map[string]bool) {
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil || len(decl.Recv.List) == 0 {
				names[decl.Name.Name] = true
				continue
			}
			typ := decl.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			switch x := typ.(type) {
			case *ast.IndexExpr: // a generic type's method
				typ = x.X
			case *ast.IndexListExpr:
				typ = x.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				names[id.Name+"."+decl.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					names[spec.Name.Name] = true
					names[spec.Name.Name+"."] = true
					var fields *ast.FieldList
					switch typ := spec.Type.(type) {
					case *ast.StructType:
						fields = typ.Fields
					case *ast.InterfaceType:
						fields = typ.Methods
					}
					if fields == nil {
						continue
					}
					for _, field := range fields.List {
						for _, n := range field.Names {
							names[spec.Name.Name+"."+n.Name] = true
						}
						if len(field.Names) == 0 { // embedded: its name is its type's
							typ := field.Type
							if star, ok := typ.(*ast.StarExpr); ok {
								typ = star.X
							}
							switch x := typ.(type) {
							case *ast.Ident:
								names[spec.Name.Name+"."+x.Name] = true
							case *ast.SelectorExpr:
								names[spec.Name.Name+"."+x.Sel.Name] = true
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
}

// isTypeName says whether name is a type: pkg.Type.Member must then be
// one of its members; of a variable or constant, the member is not
// checked.
func isTypeName(names map[string]bool, name string) bool { return names[name+"."] }
