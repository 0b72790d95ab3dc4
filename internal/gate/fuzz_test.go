package gate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParse: the -gate parser never panics, every error is an ErrSpec,
// and a gate it accepts is valid and reads back from its String.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"prometheus=http://prometheus:9090,query=app_errors_total,max=5",
		"query=rate(app_errors_total[1m]), max=0.25 ,grace=1m30s, prometheus=https://p.example/prom/",
		`prometheus=http://p:9090,query=app_errors_total{code=~"5.."} > 0,max=-1.5e3,grace=0s`,
		"prometheus=http://p:9090,query=x,max=0.30000000000000004",
		"prometheus=http://p:9090,query=x,max=1,max=2",
		"prometheus=http://u:p@p:9090,query=x,max=1",
		"prometheus=http://p:9090,query=x,max=NaN,grace=-1s",
		`prometheus=http://p:9090,query=sum by (job, code) (x),max=1`,
		"prometheus=http://[::1]:9090/,query==,max=0x1p-2",
		"",
		",,,",
		"=",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("Parse(%q): %v is no ErrSpec", s, err)
			}
			return
		}
		if err := g.Validate(); err != nil {
			t.Fatalf("Parse(%q) accepted an invalid gate %+v: %v", s, g, err)
		}
		again, err := Parse(g.String())
		if err != nil || again != g {
			t.Fatalf("Parse(%q) = %+v, whose String %q reads back as %+v, %v", s, g, g.String(), again, err)
		}
		data, err := json.Marshal(g)
		if err != nil {
			t.Fatalf("%+v: %v", g, err)
		}
		var back Gate
		if err := json.Unmarshal(data, &back); err != nil || back != g {
			t.Fatalf("%+v as JSON %s reads back as %+v, %v", g, data, back, err)
		}
	})
}

// FuzzParseFile: a -gate-file's decoder never panics, every error is an
// ErrSpec (or the reader's), and what it accepts passes ValidateList.
func FuzzParseFile(f *testing.F) {
	for _, seed := range []string{
		`[{"prometheus":"http://p:9090","query":"sum by (job, code) (rate(x[1m]))","max":0.5,"grace":"10s"},{"max":3,"query":"y","prometheus":"https://q"}]`,
		`[]`,
		`[{"prometheus":"http://p","query":"x","max":1,"max":2}]`,
		`[{"prometheus":{"url":"http://p"},"query":"x","max":1}]`,
		`[{"prometheus":"http://p","query":"x","max":1e999}]`,
		`[{"prometheus":"http://p","query":"x","max":1}] []`,
		`{"prometheus":"http://p","query":"x","max":1}`,
		`[`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		gates, err := ParseFile(strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("ParseFile(%q): %v is no ErrSpec", data, err)
			}
			return
		}
		if len(gates) == 0 || ValidateList(gates) != nil {
			t.Fatalf("ParseFile(%q) accepted %+v", data, gates)
		}
	})
}

// FuzzDecodeResponse: the decoder of Prometheus's replies never panics,
// fails only with the errors it documents, bounds what it keeps of the
// reply, and answers a value only for a successful reply.
func FuzzDecodeResponse(f *testing.F) {
	for _, seed := range []struct {
		status int
		body   string
	}{
		{200, vector("0.5")},
		{200, vector()},
		{200, vector("1", "2", "3", "4")},
		{200, vector("NaN")},
		{200, vector("+Inf")},
		{200, vector("1e999")},
		{200, scalar("2.5")},
		{200, matrixReply},
		{400, badDataReply},
		{503, timeoutReply},
		{502, "<html>Bad Gateway</html>"},
		{200, `{"status":"success"}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}`},
		{200, `{"status":"success","data":{"resultType":"string","result":[1,"x"]}}`},
		{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"b"},"histogram":[1,{}]}]}}`},
		{200, `{"status":"error"}`},
		{200, ""},
	} {
		f.Add(seed.status, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		s, err := decodeResponse(status, body)
		if err == nil {
			if status/100 != 2 {
				t.Fatalf("HTTP %d answered %+v", status, s)
			}
			if len(s.series) > maxMessage {
				t.Fatalf("series of %d bytes", len(s.series))
			}
			return
		}
		var qe *QueryError
		known := errors.As(err, &qe) || errors.Is(err, ErrNoSeries) || errors.Is(err, ErrSeveralSeries) ||
			errors.Is(err, ErrResultType) || errors.Is(err, ErrBadResponse)
		if !known {
			t.Fatalf("HTTP %d %q: an undocumented error %v", status, body, err)
		}
		if s != (sample{}) {
			t.Fatalf("an error %v with a sample %+v", err, s)
		}
		if n := len(err.Error()); n > MaxReason/2 {
			t.Fatalf("an error of %d bytes: %.200s…", n, err)
		}
	})
}
