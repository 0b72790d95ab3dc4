package otelcheck_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdfast-dev/holdfast/internal/instrument"
	"github.com/holdfast-dev/holdfast/telemetry"
)

const dashboardPath = "telemetry/dashboards/holdfast.json" // for messages; read through telemetry.Dashboard

// exported runs every instrument once through an SDK MeterProvider wired
// to the OTel Prometheus exporter (its default translation, what a user
// gets from prometheus.New()), gathers, and returns the metric families by
// name.
func exported(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	reg := promclient.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	in, err := instrument.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	p := &timedProbe{probe: probe{staleness: 3 * time.Second, maxStaleness: 10 * time.Second, headAge: time.Second,
		state: telemetry.StateFailedClosed, revision: 12, headLag: 2, failedClosed: true,
		breached: true, typeMismatches: 1, callbackPanics: 1}, closedFor: time.Second}
	m, err := in.Namespace("payments.prod", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	exerciseAll(m)
	m.Resnapshot(telemetry.ResnapshotGap)
	m.Reconnect(telemetry.ReconnectIdle)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// seriesNames are the names a PromQL query can select from the families:
// a histogram's _bucket, _sum and _count, a summary's quantiles, _sum and
// _count, and every other family under its own name.
func seriesNames(mfs map[string]*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := make(map[string]*dto.MetricFamily)
	for name, mf := range mfs {
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = mf, mf, mf
		case dto.MetricType_SUMMARY:
			out[name], out[name+"_sum"], out[name+"_count"] = mf, mf, mf
		default:
			out[name] = mf
		}
	}
	return out
}

// TestExportedNames pins the Prometheus names of the instruments (the
// package documentation lists them) and their labels.
func TestExportedNames(t *testing.T) {
	mfs := exported(t)
	want := map[string]dto.MetricType{
		"holdfast_staleness_seconds":                dto.MetricType_GAUGE,
		"holdfast_max_staleness_seconds":            dto.MetricType_GAUGE,
		"holdfast_head_age_seconds":                 dto.MetricType_GAUGE,
		"holdfast_state":                            dto.MetricType_GAUGE,
		"holdfast_revision_applied":                 dto.MetricType_GAUGE,
		"holdfast_revision_lag":                     dto.MetricType_GAUGE,
		"holdfast_state_breached":                   dto.MetricType_GAUGE,
		"holdfast_state_failed_closed":              dto.MetricType_GAUGE,
		"holdfast_failed_closed_time_seconds_total": dto.MetricType_COUNTER,
		"holdfast_getter_type_mismatches_total":     dto.MetricType_COUNTER,
		"holdfast_callback_panics_total":            dto.MetricType_COUNTER,
		"holdfast_applies_total":                    dto.MetricType_COUNTER,
		"holdfast_resnapshots_total":                dto.MetricType_COUNTER,
		"holdfast_reconnects_total":                 dto.MetricType_COUNTER,
		"holdfast_breaches_total":                   dto.MetricType_COUNTER,
		"holdfast_persist_errors_total":             dto.MetricType_COUNTER,
		"holdfast_callback_duration_seconds":        dto.MetricType_HISTOGRAM,
		"holdfast_propagation_delay_seconds":        dto.MetricType_HISTOGRAM,
	}
	var got []string
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "holdfast_") {
			continue
		}
		got = append(got, name)
		typ, ok := want[name]
		if !ok {
			t.Errorf("exported %s, not in the pinned list", name)
			continue
		}
		if mf.GetType() != typ {
			t.Errorf("%s: type %v, want %v", name, mf.GetType(), typ)
		}
		for _, m := range mf.GetMetric() {
			labels := labelMap(m)
			if labels["holdfast_namespace"] != "payments.prod" {
				t.Errorf("%s: labels %v, want holdfast_namespace=payments.prod", name, labels)
			}
		}
	}
	sort.Strings(got)
	if len(got) != len(want) {
		t.Errorf("exported %d holdfast families, want %d: %v", len(got), len(want), got)
	}
	if l := labelMap(mfs["holdfast_applies_total"].GetMetric()[0]); l["result"] == "" {
		t.Errorf("holdfast_applies_total labels %v, want result", l)
	}
	if l := labelMap(mfs["holdfast_state"].GetMetric()[0]); l["state"] == "" {
		t.Errorf("holdfast_state labels %v, want state", l)
	}
	if l := labelMap(mfs["holdfast_reconnects_total"].GetMetric()[0]); l["reason"] == "" {
		t.Errorf("holdfast_reconnects_total labels %v, want reason", l)
	}
}

func labelMap(m *dto.Metric) map[string]string {
	out := make(map[string]string)
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// dashboard is the parts of the dashboard JSON the tests read.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	GridPos     *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	raw := telemetry.Dashboard()
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d, raw
}

// allExprs returns every "expr" string anywhere in the JSON, so that no
// query escapes the check, whatever panel type or nesting holds it.
func allExprs(t *testing.T, raw []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// TestDashboardQueriesExportedNames fails if the dashboard queries a
// metric the SDK does not export under the exporter's names, if a
// template variable reads a label the metric lacks, or if an instrument
// has no panel.
func TestDashboardQueriesExportedNames(t *testing.T) {
	mfs := exported(t)
	series := seriesNames(mfs)
	d, raw := loadDashboard(t)

	exprs := allExprs(t, raw)
	if len(exprs) < 10 {
		t.Fatalf("only %d queries found in %s", len(exprs), dashboardPath)
	}
	used := make(map[string]bool) // families queried
	for _, expr := range exprs {
		names, err := promqlMetricNames(expr)
		if err != nil {
			t.Errorf("query %q: %v", expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("query %q selects no metric", expr)
		}
		for _, name := range names {
			mf, ok := series[name]
			if !ok {
				t.Errorf("query %q uses %s, which the SDK does not export", expr, name)
				continue
			}
			used[mf.GetName()] = true
			if strings.HasSuffix(name, "_bucket") && !strings.Contains(expr, "histogram_quantile") {
				t.Errorf("query %q reads buckets without histogram_quantile", expr)
			}
		}
		if strings.Contains(expr, "histogram_quantile") && !regexp.MustCompile(`\bby\s*\([^)]*\ble\b`).MatchString(expr) {
			t.Errorf("query %q: histogram_quantile needs the le label kept (by (le, ...))", expr)
		}
	}

	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.Definition
		var obj struct{ Query string }
		if json.Unmarshal(v.Query, &obj) == nil && obj.Query != "" {
			q = obj.Query
		} else {
			var s string
			if json.Unmarshal(v.Query, &s) == nil && s != "" {
				q = s
			}
		}
		sub := labelValuesRE.FindStringSubmatch(q)
		if sub == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q)
			continue
		}
		names, err := promqlMetricNames(sub[1])
		if err != nil || len(names) != 1 {
			t.Errorf("variable %s: %q: names %v, %v", v.Name, sub[1], names, err)
			continue
		}
		mf, ok := series[names[0]]
		if !ok {
			t.Errorf("variable %s reads %s, which the SDK does not export", v.Name, names[0])
			continue
		}
		if labelMap(mf.GetMetric()[0])[sub[2]] == "" {
			t.Errorf("variable %s reads label %s, which %s lacks", v.Name, sub[2], names[0])
		}
	}

	for name := range mfs {
		if strings.HasPrefix(name, "holdfast_") && !used[name] {
			t.Errorf("no panel queries %s", name)
		}
	}
}

// TestDashboardShape checks what Grafana needs to import the dashboard
// anywhere: the data source and namespace variables, every panel and query
// on ${datasource}, unique panel ids, and the panels operators rely on.
func TestDashboardShape(t *testing.T) {
	d, _ := loadDashboard(t)
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("schemaVersion %d", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("no uid or title")
	}
	vars := make(map[string]bool)
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case "datasource":
			if v.Type != "datasource" || !strings.Contains(string(v.Query), "prometheus") {
				t.Errorf("datasource variable: type %q query %s", v.Type, v.Query)
			}
		case "namespace":
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" || !v.Multi || !v.IncludeAll {
				t.Errorf("namespace variable: %+v", v)
			}
		}
	}
	if !vars["datasource"] || !vars["namespace"] {
		t.Fatalf("variables %v, want datasource and namespace", vars)
	}

	ids := make(map[int]bool)
	var titles []string
	var check func(ps []panel)
	check = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
			}
			check(p.Panels)
			if p.Type == "row" {
				continue
			}
			titles = append(titles, p.Title)
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
				t.Errorf("panel %q: datasource %+v", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no query", p.Title)
			}
			refs := make(map[string]bool)
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: query %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
				}
				if refs[tg.RefID] {
					t.Errorf("panel %q: refId %s twice", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if !strings.Contains(tg.Expr, `holdfast_namespace=~"$namespace"`) {
					t.Errorf("panel %q: query %q ignores the namespace variable", p.Title, tg.Expr)
				}
			}
		}
	}
	check(d.Panels)

	for _, want := range []string{"Fleet staleness", "Revision lag behind head (last known)",
		"Time since the server last told its head", "State by namespace", "Worst instances",
		"Namespaces breached now", "Namespaces failing closed now", "Staleness breaches",
		"Rejected updates", "Reconnect storms", "Propagation delay p99", "Callback panics",
		"Persist errors", "Fail-closed time"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q; panels: %q", want, titles)
		}
	}
	for _, p := range d.Panels {
		if p.Title == "Fleet staleness" && p.Type != "heatmap" {
			t.Errorf("Fleet staleness is a %s, want a heatmap", p.Type)
		}
	}

	// What on-call reads off the panels: counts of namespaces, not of
	// client x namespace pairs; the limit drawn with the staleness; a lag
	// that says it is the last known; a table of instances.
	byTitle := make(map[string]panel)
	for _, p := range d.Panels {
		byTitle[p.Title] = p
	}
	perNamespace := regexp.MustCompile(`^count\(max by \(holdfast_namespace\) \(`)
	for _, title := range []string{"Namespaces breached now", "Namespaces failing closed now"} {
		if p := byTitle[title]; len(p.Targets) != 1 || !perNamespace.MatchString(p.Targets[0].Expr) {
			t.Errorf("%s: queries %+v; want a count of namespaces", title, p.Targets)
		}
	}
	reads := func(title, metric string) bool {
		for _, tg := range byTitle[title].Targets {
			if names, _ := promqlMetricNames(tg.Expr); slices.Contains(names, metric) {
				return true
			}
		}
		return false
	}
	for _, c := range []struct{ title, metric string }{
		{"Staleness by namespace (worst client)", "holdfast_max_staleness_seconds"},
		{"Time since the server last told its head", "holdfast_head_age_seconds"},
		{"State by namespace", "holdfast_state"},
		{"Worst instances", "holdfast_staleness_seconds"},
		{"Worst instances", "holdfast_state"},
	} {
		if !reads(c.title, c.metric) {
			t.Errorf("panel %q does not read %s", c.title, c.metric)
		}
	}
	if p := byTitle["Worst instances"]; p.Type != "table" || len(p.Targets) == 0 || !strings.Contains(p.Targets[0].Expr, "by (instance") {
		t.Errorf("Worst instances: a %q with queries %+v; want a table by instance", p.Type, p.Targets)
	}
	for _, title := range []string{"Revision lag behind head (last known)", "Worst last-known revision lag"} {
		if !strings.Contains(strings.ToLower(byTitle[title].Description), "last time") && !strings.Contains(byTitle[title].Description, "cut off") {
			t.Errorf("%s: description %q does not say the lag is the last known", title, byTitle[title].Description)
		}
	}
}

// promqlMetricNames returns the metric names a PromQL query selects, in
// order of first use: identifiers that are not functions or aggregations
// (followed by "("), keywords, label lists of by/without/on/ignoring/
// group_left/group_right, or inside label matchers, strings, ranges and
// numbers; plus {__name__="..."} matchers. Grafana variables ($name,
// ${name}, [[name]]) are read as a number. It is no PromQL parser, but it
// refuses what it cannot tokenise, so a typo fails rather than slips by.
func promqlMetricNames(expr string) ([]string, error) {
	expr = grafanaVarRE.ReplaceAllString(expr, "0")
	type token struct {
		kind byte // 'i' identifier, '(' ')' ',' punctuation, 'o' other
		text string
		name string // for '{': the __name__ it matches
	}
	var toks []token
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment, to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: 'o', text: s[i:end]})
			i = end
		case c == '{':
			end, name, err := skipMatchers(s, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: '{', name: name})
			i = end
		case c == '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed [ at %d", i)
			}
			i += end + 1
		case c == '}' || c == ']':
			return nil, fmt.Errorf("unopened %c at %d", c, i)
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			m := numberRE.FindString(s[i:])
			i += len(m)
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			toks = append(toks, token{kind: 'i', text: s[i:j]})
			i = j
		case c == '(' || c == ')' || c == ',':
			toks = append(toks, token{kind: c, text: string(c)})
			i++
		case strings.IndexByte("+-*/%^=!<>@:", c) >= 0:
			toks = append(toks, token{kind: 'o', text: string(c)})
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}

	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	depth := 0
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		switch tk.kind {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return nil, errors.New("unbalanced )")
			}
		case '{':
			if tk.name != "" {
				add(tk.name)
			}
		case 'i':
			word := strings.ToLower(tk.text)
			next, nextWord := byte(0), ""
			if i+1 < len(toks) {
				next, nextWord = toks[i+1].kind, strings.ToLower(toks[i+1].text)
			}
			switch {
			case labelListKeywords[word]:
				if next == '(' { // skip the label list
					j := i + 2
					for j < len(toks) && toks[j].kind != ')' {
						j++
					}
					if j == len(toks) {
						return nil, fmt.Errorf("unclosed label list after %s", tk.text)
					}
					i = j
				}
			case keywords[word]:
			case next == '(': // a function or an aggregation
			case next == 'i' && (nextWord == "by" || nextWord == "without"): // sum by (...) (...)
			default:
				add(tk.text)
			}
		}
	}
	if depth != 0 {
		return nil, errors.New("unbalanced (")
	}
	return names, nil
}

var (
	grafanaVarRE = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[A-Za-z_][A-Za-z0-9_]*\]\]`)
	// A number, a hex number, or a duration (5m, 1h30m).
	numberRE = regexp.MustCompile(`^(0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?([a-zA-Z][0-9a-zA-Z]*)?)`)

	labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true}
	keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"atan2": true, "inf": true, "nan": true}
)

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

// skipString returns the index after the string literal at s[i].
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at %d", i)
}

var nameMatcherRE = regexp.MustCompile(`^\s*__name__\s*=\s*$`)

// skipMatchers returns the index after the label matchers at s[i] ('{'),
// and the metric name of a __name__="x" matcher among them.
func skipMatchers(s string, i int) (end int, name string, err error) {
	start := i + 1
	for j := start; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			k, err := skipString(s, j)
			if err != nil {
				return 0, "", err
			}
			// The text since the last comma: is this __name__="..."?
			prev := s[start:j]
			if c := strings.LastIndexByte(prev, ','); c >= 0 {
				prev = prev[c+1:]
			}
			if nameMatcherRE.MatchString(prev) {
				name = strings.Trim(s[j:k], "\"'`")
			}
			j = k - 1
		case '{', '[', '(':
			return 0, "", fmt.Errorf("unexpected %c in label matchers at %d", s[j], j)
		case '}':
			return j + 1, name, nil
		}
	}
	return 0, "", fmt.Errorf("unclosed { at %d", i)
}

func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // nil with wantErr
		err  bool
	}{
		{expr: `holdfast_applies_total`, want: []string{"holdfast_applies_total"}},
		{expr: `up{job="x"}`, want: []string{"up"}},
		{expr: `sum by (le, holdfast_namespace) (rate(x_bucket{holdfast_namespace=~"$namespace", result="a}b"}[$__rate_interval]))`,
			want: []string{"x_bucket"}},
		{expr: `histogram_quantile(0.99, sum(rate(a_bucket[5m])) by (le))`, want: []string{"a_bucket"}},
		{expr: `a / on(instance) group_left(job, pod) b`, want: []string{"a", "b"}},
		{expr: `a and b or c unless d`, want: []string{"a", "b", "c", "d"}},
		{expr: `A AND B`, want: []string{"A", "B"}},
		{expr: `{__name__="x_total", job="y"}`, want: []string{"x_total"}},
		{expr: `{job="y", __name__ = 'z'}`, want: []string{"z"}},
		{expr: `{job="__name__="}`, want: nil},
		{expr: `rate(x[5m] offset 1h30m) > bool 1e-3`, want: []string{"x"}},
		{expr: `max_over_time(x[1h:5m]) @ end()`, want: []string{"x"}},
		{expr: `x @ 1609746000`, want: []string{"x"}},
		{expr: `sum without (result) (x)`, want: []string{"x"}},
		{expr: `sum(x) without(result)`, want: []string{"x"}},
		{expr: `max BY (a) (x) - min by(a)(y)`, want: []string{"x", "y"}},
		{expr: `label_replace(x, "dst", "$1", "src", "(.*)")`, want: []string{"x"}},
		{expr: `topk(5, x) + count_values("value", y)`, want: []string{"x", "y"}},
		{expr: `1 - x * 0x1F + .5 + x`, want: []string{"x"}},
		{expr: `time() - x:recorded:rate5m`, want: []string{"x:recorded:rate5m"}},
		{expr: "# a comment\nx # another", want: []string{"x"}},
		{expr: `x atan2 y`, want: []string{"x", "y"}},
		{expr: `-Inf < x or NaN`, want: []string{"x"}},
		{expr: `histogram_quantile(${quantile}, sum by (le) (rate(y_bucket[[[interval]]])))`, want: []string{"y_bucket"}},
		{expr: `vector(1)`, want: nil},
		{expr: `x{a="b"`, err: true},
		{expr: `"abc`, err: true},
		{expr: `x[5m`, err: true},
		{expr: `sum(x`, err: true},
		{expr: `x)`, err: true},
		{expr: `x}`, err: true},
		{expr: `x ~ y`, err: true},
		{expr: `sum by (le x`, err: true},
	} {
		got, err := promqlMetricNames(tc.expr)
		if tc.err {
			if err == nil {
				t.Errorf("%q: no error, names %v", tc.expr, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: names %q, want %q", tc.expr, got, tc.want)
		}
	}
}
