package control

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// TestSummaryNamesTheCommonSDKVersionOnce: a summary names its clients'
// most common SDK version once; a report of another version names its
// own, one whose client said none says so; it decodes back to the same
// reports, and a summary without versions (an older server's) decodes as
// none said.
func TestSummaryNamesTheCommonSDKVersionOnce(t *testing.T) {
	at := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)
	s := summary{Server: "s1", At: at, Reports: []controller.Report{
		{ClientID: "a", Acked: 3, Seen: at, SDKVersion: "0.1.0"},
		{ClientID: "b", Acked: 3, Seen: at, SDKVersion: "0.2.0"},
		{ClientID: "c", Acked: 3, Seen: at},
		{ClientID: "d", Acked: 3, Seen: at, SDKVersion: "0.1.0"},
	}}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if strings.Count(text, `"0.1.0"`) != 1 || !strings.Contains(text, `"sdk_version":"0.1.0"`) ||
		!strings.Contains(text, `"c":"b","a":3,"t":"2026-12-06T17:00:00Z","v":"0.2.0"`) || !strings.Contains(text, `"c":"c","a":3,"t":"2026-12-06T17:00:00Z","v":"-"`) {
		t.Errorf("the summary:\n%s", text)
	}
	if s.Reports[0].SDKVersion != "0.1.0" || s.Reports[2].SDKVersion != "" {
		t.Errorf("encoding changed the table's reports: %+v", s.Reports)
	}
	var back summary
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("decoded\n%+v\nwant\n%+v", back, s)
	}

	old := `{"server":"s0","at":"2026-12-06T17:00:00Z","reports":[{"c":"a","a":3,"t":"2026-12-06T17:00:00Z"}]}`
	if err := json.Unmarshal([]byte(old), &back); err != nil || len(back.Reports) != 1 || back.Reports[0].SDKVersion != "" || back.Server != "s0" {
		t.Errorf("an older server's summary: %+v, %v", back, err)
	}
	none := summary{Server: "s2", At: at, Reports: []controller.Report{{ClientID: "a", Seen: at}}}
	if data, _ := json.Marshal(none); strings.Contains(string(data), "sdk_version") || strings.Contains(string(data), `"v"`) {
		t.Errorf("a summary of clients that said no version: %s", data)
	}
}

func TestCommonVersion(t *testing.T) {
	r := func(vs ...string) []controller.Report {
		var out []controller.Report
		for _, v := range vs {
			out = append(out, controller.Report{SDKVersion: v})
		}
		return out
	}
	for _, tc := range []struct {
		reports []controller.Report
		want    string
	}{
		{nil, ""}, {r("", ""), ""}, {r("0.2.0", "", "0.1.0", "0.2.0"), "0.2.0"},
		{r("0.2.0", "0.1.0"), "0.1.0"}, {r("0.1.0", "0.2.0"), "0.1.0"},
	} {
		if got := commonVersion(tc.reports); got != tc.want {
			t.Errorf("commonVersion(%+v) = %q, want %q", tc.reports, got, tc.want)
		}
	}
}
