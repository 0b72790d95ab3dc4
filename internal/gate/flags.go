package gate

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// FlagUsage is the usage text of -gate, and FileFlagUsage that of
// -gate-file, as AddFlags registers them.
const (
	FlagUsage     = "a metric gate: `prometheus=URL,query=EXPR,max=X[,grace=D]` (repeatable; grace defaults to 30s); above max, or the query failing for longer than grace, is a breach"
	FileFlagUsage = "metric gates from `FILE`, a JSON list of {\"prometheus\",\"query\",\"max\",\"grace\"} (for queries with commas; repeatable)"
)

// AddFlags registers -gate and -gate-file on fs. Both add to one list, in
// the order given on the command line; after fs.Parse, the returned
// function gives it (nil when neither flag was given), or an error when
// the gates together break a rule of ValidateList (too many, or one given
// twice). Each flag's own errors are reported by fs.Parse, as
// `invalid value "…" for flag -gate: …`.
func AddFlags(fs *flag.FlagSet) func() ([]Gate, error) {
	l := &list{}
	fs.Var(&flagValue{l}, "gate", FlagUsage)
	fs.Var(&fileValue{l}, "gate-file", FileFlagUsage)
	return func() ([]Gate, error) {
		if len(l.gates) == 0 {
			return nil, nil
		}
		if err := ValidateList(l.gates); err != nil {
			return nil, err
		}
		return l.gates, nil
	}
}

// list is the gates of -gate and -gate-file together.
type list struct{ gates []Gate }

func (l *list) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(l.gates))
	for i, g := range l.gates {
		s[i] = g.String()
	}
	return strings.Join(s, " ")
}

// flagValue is -gate: flag.Value, one gate per occurrence.
type flagValue struct{ l *list }

func (v *flagValue) String() string {
	if v == nil || v.l == nil {
		return ""
	}
	return v.l.String()
}

func (v *flagValue) Set(s string) error {
	g, err := Parse(s)
	if err != nil {
		return err
	}
	v.l.gates = append(v.l.gates, g)
	return nil
}

// fileValue is -gate-file: flag.Value, the gates of one file per
// occurrence.
type fileValue struct{ l *list }

func (v *fileValue) String() string { return "" }

func (v *fileValue) Set(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gates, err := ParseFile(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	v.l.gates = append(v.l.gates, gates...)
	return nil
}
