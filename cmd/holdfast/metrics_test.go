package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/telemetry"
)

// seriesFile lists the series a server and a relay export
// (telemetry.ServerSeries): the dashboard's and the alert rules' queries
// may use only these (internal/otelcheck checks them), and
// TestMetricsOfRealProcesses checks that each is in a real scrape.
const seriesFile = "telemetry/dashboards/holdfast-server.series"

// TestMetricsOfRealProcesses scrapes /metrics of a real `holdfast server`
// and a real `holdfast relay` in front of it, with an SDK client on each
// and a rollout running: every series of seriesFile is there, and no
// holdfast series that it does not list; a publish moves the publish
// counters and the commit latency, the clients' streams show as open
// streams at both, and the publish's propagation to both clients shows
// in the histogram and in the namespace's status.
func TestMetricsOfRealProcesses(t *testing.T) {
	bin := buildBinary(t)
	srv := startServerProc(t, bin, "-memory")
	cc := controlClient(t, srv.url(), nil)
	if _, err := publishApp(cc, "k", 1); err != nil {
		t.Fatal(err)
	}
	rel := startRelayProc(t, bin, srv.url())

	// One client direct, one through the relay; each acks revision 1,
	// so that the server knows both when the next publish commits.
	var nss []*config.Namespace
	for _, url := range []string{srv.url(), rel.url()} {
		c, _ := fleetClient(t, []string{url})
		nss = append(nss, openNS(t, c, "app"))
	}
	testutil.Eventually(t, waitLimit, func() bool {
		st, err := cc.Status(context.Background(), "app")
		return err == nil && st.Clients == 2 && st.Acked == 2
	}, "both clients' acks of the first publish")

	before := scrape(t, srv.url())
	rev, err := publishApp(cc, "k", 2)
	if err != nil {
		t.Fatal(err)
	}
	var st *controlapi.NamespaceStatus
	testutil.Eventually(t, waitLimit, func() bool {
		st, err = cc.Status(context.Background(), "app")
		return err == nil && st.Propagation != nil && st.Propagation.P100 != nil
	}, "the publish's propagation to both clients in the status")
	if p := st.Propagation; p.Revision != rev || p.Clients != 2 || p.Acked != 2 || p.P50 == nil || p.P95 == nil || *p.P50 > *p.P100 {
		b, _ := json.Marshal(p)
		t.Errorf("propagation of revision %d: %s", rev, b)
	}
	if out := mustRun(t, "status", "-server", srv.url(), "app"); !regexp.MustCompile(`(?m)^propagation\s+2/2 acked; 50% \S+, 95% \S+, 100% \S+$`).MatchString(out) {
		t.Errorf("holdfast status:\n%s", out)
	}

	// A rollout that bakes for the test's length: its stage shows.
	if _, err := cc.Publish(context.Background(), "roll", controlapi.PublishRequest{Puts: map[string]json.RawMessage{"k": json.RawMessage("1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.StartRollout(context.Background(), "roll", controlapi.RolloutRequest{
		Puts: map[string]json.RawMessage{"k": json.RawMessage("2")}, Stages: []float64{50, 100}, Bake: "10m"}); err != nil {
		t.Fatal(err)
	}

	var after map[string]*dto.MetricFamily
	testutil.Eventually(t, waitLimit, func() bool {
		after = scrape(t, srv.url())
		v, _ := metricValue(after, "holdfast_server_rollouts_running", nil)
		return v == 1
	}, "the rollout running in the server's metrics")
	for _, m := range []struct {
		name   string
		labels map[string]string
		delta  float64
	}{
		{"holdfast_server_publishes_total", nil, 2},
		{"holdfast_server_publish_duration_seconds", map[string]string{"kind": "publish", "result": "ok"}, 2},
		{"holdfast_server_request_duration_seconds", map[string]string{"route": "/control/namespaces/{ns}/publish", "method": "POST", "code": "200"}, 2},
		{"holdfast_server_propagation_duration_seconds", map[string]string{"share": "1"}, 1},
	} {
		a, _ := metricValue(after, m.name, m.labels)
		b, _ := metricValue(before, m.name, m.labels)
		if d := a - b; d < m.delta {
			t.Errorf("%s%v moved by %v, want at least %v", m.name, m.labels, d, m.delta)
		}
	}
	for name, want := range map[string]float64{"holdfast_server_streams_open": 2, "holdfast_server_leader": 1, "holdfast_server_store_up": 1} {
		// The relay's stream, and the direct client's.
		if v, ok := metricValue(after, name, nil); !ok || v < want {
			t.Errorf("%s = %v (present %v), want at least %v", name, v, ok, want)
		}
	}
	// The direct client, and the relay's, which the relay reports.
	testutil.Eventually(t, waitLimit, func() bool {
		v, _ := metricValue(scrape(t, srv.url()), "holdfast_server_clients", map[string]string{"state": "live"})
		return v >= 2
	}, "holdfast_server_clients{state=live} at 2")
	if v, ok := metricValue(after, "holdfast_server_rollout_stage", map[string]string{"holdfast_namespace": "roll"}); !ok || v != 1 {
		t.Errorf("holdfast_server_rollout_stage{holdfast_namespace=roll} = %v (present %v), want 1", v, ok)
	}

	var relayed map[string]*dto.MetricFamily
	testutil.Eventually(t, waitLimit, func() bool {
		relayed = scrape(t, rel.url())
		v, _ := metricValue(relayed, "holdfast_relay_upstream_up", nil)
		return v == 1
	}, "the relay's upstream up")
	if v, ok := metricValue(relayed, "holdfast_relay_streams_open", nil); !ok || v < 1 {
		t.Errorf("holdfast_relay_streams_open = %v (present %v), want at least 1", v, ok)
	}
	if v, ok := metricValue(relayed, "holdfast_relay_namespace_streams", map[string]string{"holdfast_namespace": "app"}); !ok || v < 1 {
		t.Errorf("holdfast_relay_namespace_streams{app} = %v (present %v), want at least 1", v, ok)
	}
	if v, _ := metricValue(relayed, "holdfast_relay_request_duration_seconds", map[string]string{"route": "/sdk/snapshot", "code": "200"}); v < 1 {
		t.Errorf("holdfast_relay_request_duration_seconds{route=/sdk/snapshot} counted %v, want at least 1", v)
	}

	// Every series listed is in the scrapes, and every holdfast series
	// of the scrapes is listed.
	listed := telemetry.ServerSeries()
	got := map[string]bool{}
	for _, fams := range []map[string]*dto.MetricFamily{after, relayed} {
		for name, f := range fams {
			if !strings.HasPrefix(name, "holdfast_") {
				continue
			}
			for _, s := range promSeries(name, f) {
				got[s] = true
				if !slices.Contains(listed, s) {
					t.Errorf("the scrape has %s, which %s does not list", s, seriesFile)
				}
			}
		}
	}
	for _, s := range listed {
		if !got[s] {
			t.Errorf("%s lists %s, which no scrape has", seriesFile, s)
		}
	}
}

// scrape returns the families of base's /metrics.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, _ := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("%s/metrics: %d %s", base, code, body)
	}
	return parseMetrics(t, body)
}

// promSeries are the names a query selects of family name: a
// histogram's _bucket, _sum and _count, else the name.
func promSeries(name string, f *dto.MetricFamily) []string {
	if f.GetType() == dto.MetricType_HISTOGRAM {
		return []string{name + "_bucket", name + "_count", name + "_sum"}
	}
	return []string{name}
}
