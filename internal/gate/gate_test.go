package gate

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const promURL = "http://prometheus:9090"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Gate
		wantErr string // a part of the error; "" for none
	}{
		{in: "prometheus=http://prometheus:9090,query=app_errors_total,max=5",
			want: Gate{Prometheus: promURL, Query: "app_errors_total", Max: 5, Grace: DefaultGrace}},
		{in: "query=rate(app_errors_total[1m]), max=0.25 ,grace=1m30s, prometheus=https://p.example/prom/",
			want: Gate{Prometheus: "https://p.example/prom/", Query: "rate(app_errors_total[1m])", Max: 0.25, Grace: 90 * time.Second}},
		{in: `prometheus=http://p:9090,query=app_errors_total{code=~"5.."} > 0,max=-1.5e3,grace=0s`,
			want: Gate{Prometheus: "http://p:9090", Query: `app_errors_total{code=~"5.."} > 0`, Max: -1500, Grace: 0}},
		// The figures are kept in full.
		{in: "prometheus=http://p:9090,query=x,max=0.30000000000000004",
			want: Gate{Prometheus: "http://p:9090", Query: "x", Max: 0.30000000000000004, Grace: DefaultGrace}},

		{in: "", wantErr: "empty field"},
		{in: "prometheus=http://p:9090,,query=x,max=1", wantErr: "empty field"},
		{in: "prometheus=http://p:9090,query=x,max=1,", wantErr: "empty field"},
		{in: "prometheus=http://p:9090,query=x,max=1,timeout=5s", wantErr: `unknown field "timeout"`},
		{in: "prometheus=http://p:9090,Query=x,max=1", wantErr: `unknown field "Query"`},
		{in: "prometheus=http://p:9090,query=x,max=1,max=2", wantErr: `field "max" given twice`},
		{in: "prometheus=http://p:9090,query=x,query=y,max=1", wantErr: `field "query" given twice`},
		{in: "query=x,max=1", wantErr: "prometheus= is required"},
		{in: "prometheus=http://p:9090,max=1", wantErr: "query= is required"},
		{in: "prometheus=http://p:9090,query=x", wantErr: "max= is required"},
		{in: "prometheus=http://p:9090,query=,max=1", wantErr: "the query is empty"},
		{in: "prometheus=,query=x,max=1", wantErr: "the prometheus URL is empty"},
		{in: "prometheus=http://p:9090,query=\xff,max=1", wantErr: "the query is not UTF-8"},
		{in: "prometheus=http://p:9090/\xff,query=x,max=1", wantErr: "the prometheus URL is not UTF-8"},
		{in: "prometheus=http://p:9090,query=x,max=lots", wantErr: `max="lots" is not a number`},
		{in: "prometheus=http://p:9090,query=x,max=Inf", wantErr: "max must be a finite number"},
		{in: "prometheus=http://p:9090,query=x,max=NaN", wantErr: "max must be a finite number"},
		{in: "prometheus=http://p:9090,query=x,max=1,grace=-1s", wantErr: "grace must not be negative"},
		{in: "prometheus=http://p:9090,query=x,max=1,grace=30", wantErr: `grace="30" is not a duration`},
		{in: "prometheus=ftp://p:9090,query=x,max=1", wantErr: "the scheme must be http or https"},
		{in: "prometheus=p:9090,query=x,max=1", wantErr: "the scheme must be http or https"},
		{in: "prometheus=http://,query=x,max=1", wantErr: "has no host"},
		{in: "prometheus=http://u:secret@p:9090,query=x,max=1", wantErr: "carries credentials"},
		{in: "prometheus=http://p:9090/?x=1,query=x,max=1", wantErr: "without a query or fragment"},
		{in: "prometheus=http://p:9090/api/v1/query,query=x,max=1", wantErr: "without /api/v1/query"},
		{in: "prometheus=http://p:9090,query=x,max", wantErr: `field "max" is not NAME=VALUE`},
		// A comma in the query: the rest of it is not a field.
		{in: `prometheus=http://p:9090,query=sum by (job, code) (x),max=1`,
			wantErr: `field " code) (x)" is not NAME=VALUE (a query containing a comma goes in -gate-file)`},
		{in: `prometheus=http://p:9090,query=x{a="1",b="2"},max=1`,
			wantErr: `unknown field "b" (want prometheus, query, max, grace) (a query containing a comma goes in -gate-file)`},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("Parse(%q): %v", tc.in, err)
		case tc.wantErr != "" && err == nil:
			t.Errorf("Parse(%q) = %+v, want an error with %q", tc.in, got, tc.wantErr)
		case tc.wantErr != "" && (!strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrSpec)):
			t.Errorf("Parse(%q): %v, want an ErrSpec with %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && got != tc.want:
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		case tc.wantErr == "":
			// String reads back as the same gate.
			if again, err := Parse(got.String()); err != nil || again != got {
				t.Errorf("Parse(%q.String()) = %+v, %v; want %+v", tc.in, again, err, got)
			}
		}
	}
}

func TestParseFile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Gate
		wantErr  string
	}{
		{name: "two gates, a query with commas, grace defaulted",
			in: `[{"prometheus":"http://p:9090","query":"sum by (job, code) (rate(x[1m]))","max":0.5,"grace":"10s"},
			      {"max":3,"query":"y","prometheus":"https://q"}]`,
			want: []Gate{
				{Prometheus: "http://p:9090", Query: "sum by (job, code) (rate(x[1m]))", Max: 0.5, Grace: 10 * time.Second},
				{Prometheus: "https://q", Query: "y", Max: 3, Grace: DefaultGrace},
			}},
		{name: "empty list", in: `[]`, wantErr: "lists no gate"},
		{name: "not a list", in: `{"prometheus":"http://p","query":"x","max":1}`, wantErr: "a JSON list of gates, got an object"},
		{name: "not JSON", in: `prometheus=http://p`, wantErr: "not JSON"},
		{name: "unknown field", in: `[{"prometheus":"http://p","query":"x","max":1,"timeout":"1s"}]`, wantErr: `gate 1: gate: invalid gate: unknown field "timeout"`},
		{name: "field in another case", in: `[{"Prometheus":"http://p","query":"x","max":1}]`, wantErr: `unknown field "Prometheus"`},
		{name: "repeated field", in: `[{"prometheus":"http://p","query":"x","max":1,"max":2}]`, wantErr: `field "max" given twice`},
		{name: "missing max", in: `[{"prometheus":"http://p","query":"x"}]`, wantErr: "max= is required"},
		{name: "max a string", in: `[{"prometheus":"http://p","query":"x","max":"1"}]`, wantErr: "max is a JSON number"},
		{name: "query a number", in: `[{"prometheus":"http://p","query":1,"max":1}]`, wantErr: "query is a JSON string"},
		{name: "grace null", in: `[{"prometheus":"http://p","query":"x","max":1,"grace":null}]`, wantErr: "grace: want a string, got null"},
		{name: "max overflows", in: `[{"prometheus":"http://p","query":"x","max":1e999}]`, wantErr: "is not a number"},
		{name: "negative grace", in: `[{"prometheus":"http://p","query":"x","max":1,"grace":"-5s"}]`, wantErr: "grace must not be negative"},
		{name: "second gate bad", in: `[{"prometheus":"http://p","query":"x","max":1},{"prometheus":"unix:///s","query":"x","max":1}]`, wantErr: "gate 2: gate: invalid gate: prometheus=\"unix:///s\""},
		{name: "same gate twice", in: `[{"prometheus":"http://p","query":"x","max":1},{"prometheus":"http://p","query":"x","max":2}]`, wantErr: "gates 1 and 2 are the same query"},
		{name: "trailing data", in: `[{"prometheus":"http://p","query":"x","max":1}] []`, wantErr: "data after the list"},
		{name: "truncated", in: `[{"prometheus":"http://p","query":"x","max":1}`, wantErr: "not JSON"},
		{name: "nested value", in: `[{"prometheus":{"url":"http://p"},"query":"x","max":1}]`, wantErr: "prometheus: want a string, got an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFile(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrSpec) {
					t.Fatalf("ParseFile: %+v, %v; want an ErrSpec with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("gate %d: %+v, want %+v", i+1, got[i], tc.want[i])
				}
			}
		})
	}
	big := "[" + strings.Repeat(" ", MaxFileSize) + "]"
	if _, err := ParseFile(strings.NewReader(big)); err == nil || !strings.Contains(err.Error(), "over 65536 bytes") {
		t.Errorf("a file over MaxFileSize: %v", err)
	}
}

func TestGateJSON(t *testing.T) {
	g := Gate{Prometheus: promURL, Query: `sum(rate(x{a="1",b="2"}[1m]))`, Max: 0.1, Grace: 45 * time.Second}
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"prometheus":"http://prometheus:9090","query":"sum(rate(x{a=\"1\",b=\"2\"}[1m]))","max":0.1,"grace":"45s"}`
	if string(data) != want {
		t.Fatalf("JSON %s, want %s", data, want)
	}
	var back Gate
	if err := json.Unmarshal(data, &back); err != nil || back != g {
		t.Fatalf("read back %+v, %v; want %+v", back, err, g)
	}
	// Inside a larger document (the control API's rollout spec).
	var spec struct {
		Gates []Gate `json:"gates"`
	}
	if err := json.Unmarshal([]byte(`{"gates":[{"prometheus":"http://p","query":"x","max":1,"grace":"1m"}]}`), &spec); err != nil ||
		len(spec.Gates) != 1 || spec.Gates[0].Grace != time.Minute {
		t.Fatalf("in a spec: %+v, %v", spec, err)
	}
	if err := json.Unmarshal([]byte(`{"gates":[{"prometheus":"http://p","query":"x","max":1,"extra":1}]}`), &spec); !errors.Is(err, ErrSpec) {
		t.Fatalf("an unknown field in a spec: %v", err)
	}
	if _, err := json.Marshal(Gate{Prometheus: promURL, Query: "x", Max: math.Inf(1)}); err == nil {
		t.Fatal("a gate with max +Inf marshalled")
	}
}

func TestValidateList(t *testing.T) {
	gates := make([]Gate, MaxGates+1)
	for i := range gates {
		gates[i] = Gate{Prometheus: promURL, Query: "x" + strings.Repeat("y", i), Max: 1}
	}
	if err := ValidateList(gates[:MaxGates]); err != nil {
		t.Fatalf("MaxGates gates: %v", err)
	}
	if err := ValidateList(gates); err == nil || !strings.Contains(err.Error(), "17 gates, over 16") {
		t.Fatalf("MaxGates+1 gates: %v", err)
	}
	long := Gate{Prometheus: promURL, Query: strings.Repeat("x", MaxQueryLen+1), Max: 1}
	if err := ValidateList([]Gate{long}); err == nil || !strings.Contains(err.Error(), "gate 1: ") || !strings.Contains(err.Error(), "over 2048") {
		t.Fatalf("a long query: %v", err)
	}
	if err := ValidateList(nil); err != nil {
		t.Fatalf("no gate: %v", err)
	}
}

// TestAddFlags: -gate and -gate-file on a FlagSet, as cmd/holdfast uses
// them, with the flag package's own error text.
func TestAddFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gates.json")
	if err := os.WriteFile(file, []byte(`[{"prometheus":"http://p:9090","query":"sum by (a, b) (x)","max":2}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`[{"prometheus":"http://p:9090","query":"x"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	newFS := func() (*flag.FlagSet, func() ([]Gate, error)) {
		fs := flag.NewFlagSet("rollout start", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return fs, AddFlags(fs)
	}

	fs, gates := newFS()
	if err := fs.Parse([]string{"-gate", "prometheus=http://p:9090,query=up,max=1", "-gate-file", file, "-gate", "prometheus=http://q:9090,query=y,max=0,grace=5s"}); err != nil {
		t.Fatal(err)
	}
	got, err := gates()
	if err != nil {
		t.Fatal(err)
	}
	want := []Gate{
		{Prometheus: "http://p:9090", Query: "up", Max: 1, Grace: DefaultGrace},
		{Prometheus: "http://p:9090", Query: "sum by (a, b) (x)", Max: 2, Grace: DefaultGrace},
		{Prometheus: "http://q:9090", Query: "y", Max: 0, Grace: 5 * time.Second},
	}
	if len(got) != len(want) {
		t.Fatalf("gates %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("gate %d: %+v, want %+v", i+1, got[i], want[i])
		}
	}

	fs, gates = newFS()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got, err := gates(); got != nil || err != nil {
		t.Fatalf("no flag: %+v, %v", got, err)
	}

	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-gate", "prometheus=http://p,query=x"}, `invalid value "prometheus=http://p,query=x" for flag -gate: gate: invalid gate: max= is required`},
		{[]string{"-gate-file", bad}, `invalid value "` + bad + `" for flag -gate-file: ` + bad + `: gate 1: gate: invalid gate: max= is required`},
		{[]string{"-gate-file", filepath.Join(dir, "none.json")}, "no such file"},
	} {
		fs, _ := newFS()
		if err := fs.Parse(tc.args); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.wantErr)
		}
	}

	// Rules over the whole list: the same gate by -gate and by the file.
	fs, gates = newFS()
	if err := fs.Parse([]string{"-gate-file", file, "-gate-file", file}); err != nil {
		t.Fatal(err)
	}
	if _, err := gates(); err == nil || !strings.Contains(err.Error(), "gates 1 and 2 are the same query") {
		t.Fatalf("a file given twice: %v", err)
	}
}
