package gate_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/gate"
)

// A controller's use of a gate: parsed from a -gate flag, started when
// the rollout starts, checked while a stage bakes, with the controller's
// own clock. The Prometheus here is a fake whose error count rises to 3.
func Example() {
	var errorsTotal atomic.Int64
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"app"},"value":[1733346000,"%d"]}]}}`, errorsTotal.Load())
	}))
	defer prom.Close()

	fs := flag.NewFlagSet("rollout start", flag.ContinueOnError)
	gates := gate.AddFlags(fs)
	if err := fs.Parse([]string{"-gate", "prometheus=" + prom.URL + ",query=sum(app_errors_total),max=2"}); err != nil {
		fmt.Println(err)
		return
	}
	list, err := gates()
	if err != nil {
		fmt.Println(err)
		return
	}
	set, err := gate.NewSet(list, gate.WithTimeout(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()

	ctx, now := context.Background(), time.Date(2026, 12, 4, 21, 0, 0, 0, time.UTC)
	results, err := set.Start(ctx, now)
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println(results[0].Status, results[0].Value)

	errorsTotal.Store(3)
	results, err = set.Check(ctx, now.Add(gate.DefaultInterval))
	if err != nil {
		fmt.Println(err)
		return
	}
	if breach, ok := gate.Breached(results); ok {
		fmt.Println(breach.Status, breach.Value, breach.Gate.Max)
	}
	// Output:
	// pass 0
	// breach 3 2
}

// Parse reads one -gate flag; a query with a comma needs a -gate-file.
func ExampleParse() {
	g, err := gate.Parse("prometheus=http://prometheus:9090,query=sum(rate(app_errors_total[1m])),max=0.5")
	fmt.Println(g.Max, g.Grace, err)

	_, err = gate.Parse("prometheus=http://prometheus:9090,query=sum by (job, code) (app_errors_total),max=1")
	fmt.Println(err)
	// Output:
	// 0.5 30s <nil>
	// gate: invalid gate: field " code) (app_errors_total)" is not NAME=VALUE (a query containing a comma goes in -gate-file)
}

// ParseFile reads a -gate-file, for queries with commas.
func ExampleParseFile() {
	gates, err := gate.ParseFile(strings.NewReader(`[
	  {"prometheus": "http://prometheus:9090", "query": "sum by (job, code) (rate(app_errors_total[1m]))", "max": 0.5, "grace": "1m"}
	]`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(gates), gates[0].Query, gates[0].Grace)
	// Output:
	// 1 sum by (job, code) (rate(app_errors_total[1m])) 1m0s
}
