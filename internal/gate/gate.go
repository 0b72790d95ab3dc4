package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// DefaultGrace is how long a gate's query may fail (or return no series)
// before the failure is a breach, when the gate does not say.
const DefaultGrace = 30 * time.Second

// Bounds of a gate spec: a rollout's spec is stored and audited, so no
// part of it grows without limit.
const (
	// MaxGates bounds the gates of one rollout.
	MaxGates = 16
	// MaxQueryLen bounds a query's length in bytes.
	MaxQueryLen = 2048
	// MaxURLLen bounds a Prometheus URL's length in bytes.
	MaxURLLen = 1024
	// MaxFileSize bounds a -gate-file.
	MaxFileSize = 64 << 10
)

// ErrSpec is wrapped by every error about a gate's spec (its flag, its
// file, its JSON): errors.Is(err, ErrSpec).
var ErrSpec = errors.New("gate: invalid gate")

// Gate is one metric gate: a PromQL instant query that must stay at or
// under Max while a stage bakes.
//
// Its JSON form is the -gate-file's and the control API's:
//
//	{"prometheus": "http://prometheus:9090", "query": "sum(rate(app_errors_total[1m]))", "max": 0.5, "grace": "30s"}
//
// grace is a Go duration; omitted, it is DefaultGrace.
type Gate struct {
	// Prometheus is the base URL of Prometheus's HTTP API (http or https,
	// a host, an optional path prefix; no query, fragment or credentials):
	// the query goes to Prometheus + "/api/v1/query".
	Prometheus string
	// Query is the PromQL expression, evaluated as an instant query. It
	// must return a scalar or a vector of at most one series.
	Query string
	// Max is the highest value that passes (finite). A value above it is
	// a breach.
	Max float64
	// Grace is how long the query may keep failing (an error, no series,
	// NaN) before that is a breach. Zero: the first failure is a breach.
	// The parsers fill in DefaultGrace when it is not given.
	Grace time.Duration
}

// The field names of the -gate syntax and of the JSON form.
const (
	fieldPrometheus = "prometheus"
	fieldQuery      = "query"
	fieldMax        = "max"
	fieldGrace      = "grace"
)

var fieldNames = []string{fieldPrometheus, fieldQuery, fieldMax, fieldGrace}

// specError is an error about a gate's spec; it wraps ErrSpec.
func specError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrSpec, fmt.Sprintf(format, args...))
}

// Parse reads one -gate flag's value: comma-separated NAME=VALUE fields,
// prometheus=URL, query=EXPR and max=X required, grace=D optional
// (DefaultGrace), each at most once. Spaces around names and values are
// dropped. A query containing a comma cannot be written here: it goes in
// a -gate-file (ParseFile).
func Parse(s string) (Gate, error) {
	seen := map[string]string{}
	afterQuery := false // a comma inside a query splits it: say so
	hint := func() string {
		if afterQuery {
			return " (a query containing a comma goes in -gate-file)"
		}
		return ""
	}
	for part := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(part, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok && strings.TrimSpace(part) == "":
			return Gate{}, specError("empty field in %q", s)
		case !ok:
			return Gate{}, specError("field %q is not NAME=VALUE%s", part, hint())
		case !slices.Contains(fieldNames, name):
			return Gate{}, specError("unknown field %q (want %s)%s", name, strings.Join(fieldNames, ", "), hint())
		}
		if _, dup := seen[name]; dup {
			return Gate{}, specError("field %q given twice", name)
		}
		seen[name] = value
		afterQuery = afterQuery || name == fieldQuery
	}
	return fromFields(seen)
}

// fromFields checks the fields of one gate, named and given as text, and
// makes the gate.
func fromFields(f map[string]string) (Gate, error) {
	for _, name := range []string{fieldPrometheus, fieldQuery, fieldMax} {
		if _, ok := f[name]; !ok {
			return Gate{}, specError("%s= is required (a gate is prometheus=URL,query=EXPR,max=X[,grace=D])", name)
		}
	}
	g := Gate{Prometheus: f[fieldPrometheus], Query: f[fieldQuery], Grace: DefaultGrace}
	maxText := f[fieldMax]
	m, err := strconv.ParseFloat(maxText, 64)
	if err != nil {
		return Gate{}, specError("max=%q is not a number", maxText)
	}
	g.Max = m
	if text, ok := f[fieldGrace]; ok {
		d, err := time.ParseDuration(text)
		if err != nil {
			return Gate{}, specError("grace=%q is not a duration (e.g. 30s, 2m)", text)
		}
		g.Grace = d
	}
	return g, g.Validate()
}

// Validate checks a gate made in code, as the parsers check theirs.
func (g Gate) Validate() error {
	if err := checkURL(g.Prometheus); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(g.Query) == "":
		return specError("the query is empty")
	case !utf8.ValidString(g.Query):
		return specError("the query is not UTF-8")
	case len(g.Query) > MaxQueryLen:
		return specError("the query is %d bytes, over %d", len(g.Query), MaxQueryLen)
	case math.IsNaN(g.Max) || math.IsInf(g.Max, 0):
		return specError("max must be a finite number, got %v", g.Max)
	case g.Grace < 0:
		return specError("grace must not be negative, got %v", g.Grace)
	}
	return nil
}

// checkURL accepts the base URL of a Prometheus: http or https, a host, a
// path; credentials are refused because the gate is written to the
// rollout's record and the audit.
func checkURL(s string) error {
	if s == "" {
		return specError("the prometheus URL is empty")
	}
	if !utf8.ValidString(s) {
		return specError("the prometheus URL is not UTF-8")
	}
	if len(s) > MaxURLLen {
		return specError("the prometheus URL is %d bytes, over %d", len(s), MaxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return specError("prometheus=%q is not a URL: %v", s, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return specError("prometheus=%q: the scheme must be http or https", s)
	case u.Host == "" || u.Hostname() == "":
		return specError("prometheus=%q has no host", s)
	case u.User != nil:
		return specError("prometheus=%q carries credentials, which the rollout's record and audit would show", s)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return specError("prometheus=%q: the URL is Prometheus's base (e.g. http://prometheus:9090), without a query or fragment", s)
	case strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/api/v1/query"):
		return specError("prometheus=%q: give Prometheus's base URL, without /api/v1/query", s)
	}
	return nil
}

// String is g in the -gate syntax (Parse reads it back, unless the query
// contains a comma).
func (g Gate) String() string {
	return fieldPrometheus + "=" + g.Prometheus + "," + fieldQuery + "=" + g.Query + "," +
		fieldMax + "=" + formatFloat(g.Max) + "," + fieldGrace + "=" + g.Grace.String()
}

// formatFloat writes f in full: the shortest text that reads back as f
// (figures are never rounded in a gate's results).
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// MarshalJSON writes the JSON form: max a number, grace a Go duration.
func (g Gate) MarshalJSON() ([]byte, error) {
	if math.IsNaN(g.Max) || math.IsInf(g.Max, 0) {
		return nil, specError("max must be a finite number, got %v", g.Max)
	}
	return json.Marshal(struct {
		Prometheus string          `json:"prometheus"`
		Query      string          `json:"query"`
		Max        json.RawMessage `json:"max"`
		Grace      string          `json:"grace"`
	}{g.Prometheus, g.Query, json.RawMessage(formatFloat(g.Max)), g.Grace.String()})
}

// UnmarshalJSON reads the JSON form as strictly as Parse reads a flag: an
// unknown or repeated field, a missing prometheus, query or max, or an
// invalid value is an error. grace omitted is DefaultGrace.
func (g *Gate) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	got, err := decodeObject(dec)
	if err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return specError("data after the gate's object")
	}
	parsed, err := fromFields(got)
	if err != nil {
		return err
	}
	*g = parsed
	return nil
}

// decodeObject reads one gate object from dec, field by field (the
// standard decoder would let a repeated field win silently, and match
// names regardless of case), as the text of each field.
func decodeObject(dec *json.Decoder) (map[string]string, error) {
	if tok, err := dec.Token(); err != nil {
		return nil, specError("not JSON: %v", err)
	} else if tok != json.Delim('{') {
		return nil, specError("a gate is a JSON object, got %v", tokenText(tok))
	}
	got := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, specError("not JSON: %v", err)
		}
		name, _ := tok.(string) // in an object, More's token is a key
		if !slices.Contains(fieldNames, name) {
			return nil, specError("unknown field %q (want %s)", name, strings.Join(fieldNames, ", "))
		}
		if _, dup := got[name]; dup {
			return nil, specError("field %q given twice", name)
		}
		if tok, err = dec.Token(); err != nil {
			return nil, specError("%s: not JSON: %v", name, err)
		}
		switch v := tok.(type) {
		case string:
			if name == fieldMax {
				return nil, specError("max is a JSON number, got the string %q", v)
			}
			got[name] = v
		case json.Number:
			if name != fieldMax {
				return nil, specError("%s is a JSON string, got the number %s", name, v)
			}
			got[name] = v.String()
		default:
			return nil, specError("%s: want a %s, got %s", name, map[bool]string{true: "number", false: "string"}[name == fieldMax], tokenText(tok))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, specError("not JSON: %v", err)
	}
	return got, nil
}

// tokenText names a JSON token for an error.
func tokenText(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return map[json.Delim]string{'{': "an object", '[': "an array", '}': "the end of an object", ']': "the end of an array"}[v]
	case nil:
		return "null"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%v", tok)
}

// ParseFile reads a -gate-file: a JSON list of gates in their JSON form,
// for queries a -gate flag cannot hold (those with commas). An empty list
// is an error (a file that means to gate and gates nothing is a mistake).
func ParseFile(r io.Reader) ([]Gate, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, specError("the gate file is over %d bytes", MaxFileSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return nil, specError("not JSON: %v", err)
	} else if tok != json.Delim('[') {
		return nil, specError("a gate file is a JSON list of gates, got %s", tokenText(tok))
	}
	var gates []Gate
	for i := 1; dec.More(); i++ {
		f, err := decodeObject(dec)
		if err != nil {
			return nil, fmt.Errorf("gate %d: %w", i, err)
		}
		g, err := fromFields(f)
		if err != nil {
			return nil, fmt.Errorf("gate %d: %w", i, err)
		}
		gates = append(gates, g)
	}
	if _, err := dec.Token(); err != nil {
		return nil, specError("not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, specError("data after the list of gates")
	}
	if len(gates) == 0 {
		return nil, specError("the gate file lists no gate")
	}
	return gates, ValidateList(gates)
}

// ValidateList checks the gates of one rollout: each valid, at most
// MaxGates, no two alike.
func ValidateList(gates []Gate) error {
	if len(gates) > MaxGates {
		return specError("%d gates, over %d", len(gates), MaxGates)
	}
	for i, g := range gates {
		if err := g.Validate(); err != nil {
			return fmt.Errorf("gate %d: %w", i+1, err)
		}
		for j := range i {
			if gates[j].Prometheus == g.Prometheus && gates[j].Query == g.Query {
				return specError("gates %d and %d are the same query on the same Prometheus", j+1, i+1)
			}
		}
	}
	return nil
}
