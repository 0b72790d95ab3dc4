//go:build scale

package scale

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// countSample is one read of a rollout's record: when it answered, the
// revision of the stage it was in, and how many of the stage's members
// the controller counted as having reported it, of how many.
type countSample struct {
	at                time.Time
	rev               int64
	reported, inStage int
}

// allCounted returns when the reads first counted every member of the
// stage of revision rev as reported; false when none did.
func allCounted(samples []countSample, rev int64) (time.Time, bool) {
	for _, s := range samples {
		if s.rev == rev && s.inStage > 0 && s.reported >= s.inStage {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// forwardedAcks returns, for each revision of namespace ns, when the
// relays first forwarded each member's report of it (an ack or a nack of
// rollout), in order: from the relays' debug logs (-v -log-format json),
// whose "acks forwarded" lines give when each batch's send began. A
// client reports again at every progress event while a rollout runs: only
// its first send of a revision counts. ok is false when no log has such a
// line (a relay of a build without it).
func forwardedAcks(b testing.TB, logs []string, ns, rollout string) (sends map[int64][]time.Time, ok bool) {
	b.Helper()
	type key struct {
		client string
		rev    int64
	}
	first := map[key]time.Time{}
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		for {
			// A batch of thousands of acks is a long line: no Scanner.
			line, err := r.ReadBytes('\n')
			if len(line) > 0 && strings.Contains(string(line), `"acks forwarded"`) {
				var rec struct {
					Msg  string    `json:"msg"`
					Sent time.Time `json:"sent"`
					Acks []string  `json:"acks"`
				}
				if err := json.Unmarshal(line, &rec); err != nil {
					b.Fatalf("%s: %v", path, err)
				}
				ok = ok || rec.Msg == "acks forwarded"
				for _, a := range rec.Acks {
					// "ns revision status rollout client"
					f := strings.SplitN(a, " ", 5)
					if len(f) != 5 || f[0] != ns || f[3] != rollout || (f[2] != "ack" && f[2] != "nack") {
						continue
					}
					rev, err := strconv.ParseInt(f[1], 10, 64)
					if err != nil {
						b.Fatalf("%s: ack %q: %v", path, a, err)
					}
					k := key{f[4], rev}
					if t, seen := first[k]; !seen || rec.Sent.Before(t) {
						first[k] = rec.Sent
					}
				}
			}
			if err != nil {
				break
			}
		}
		f.Close()
	}
	sends = map[int64][]time.Time{}
	for k, t := range first {
		sends[k.rev] = append(sends[k.rev], t)
	}
	for _, ts := range sends {
		slices.SortFunc(ts, time.Time.Compare)
	}
	return sends, ok
}

// pipelineLatencies matches, for the stage of revision rev, the k-th
// member's report forwarded (sends, in order) with the first read of the
// record that counted k of them, and returns each pair's time, and how
// many reports sent were never counted in the stage's reads (members the
// controller did not wait for, or reports it never took). Exact when
// reports are counted in the order they were sent. When they are not (a
// relay's reports straight to the leader, another's through the other
// server), the matching narrows the spread: its max is at most the true
// max (of the k members sent first, one was counted no earlier than the
// k-th count), its min at least the true min.
func pipelineLatencies(sends []time.Time, samples []countSample, rev int64) (lat []time.Duration, uncounted int) {
	k := 0
	for _, s := range samples {
		if s.rev != rev {
			continue
		}
		for ; k < s.reported && k < len(sends); k++ {
			lat = append(lat, s.at.Sub(sends[k]))
		}
	}
	return lat, len(sends) - k
}

// reportLatencies reports lat's p50, p99 and max in seconds as
// pipelineSTAGE-p50-s etc. (stage "" for every stage's together), and
// returns them in words.
func reportLatencies(b *testing.B, stage string, lat []time.Duration) string {
	if len(lat) == 0 {
		return "none counted"
	}
	lat = slices.Clone(lat)
	slices.Sort(lat)
	p50, p99, max := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	b.ReportMetric(p50.Seconds(), "pipeline"+stage+"-p50-s")
	b.ReportMetric(p99.Seconds(), "pipeline"+stage+"-p99-s")
	b.ReportMetric(max.Seconds(), "pipeline"+stage+"-max-s")
	return fmt.Sprintf("p50 %v, p99 %v, max %v over %d", p50.Round(time.Millisecond), p99.Round(time.Millisecond), max.Round(time.Millisecond), len(lat))
}

// The relays' logs give each member's first delivered send of a
// revision, in order, whatever the relay; the k-th send is matched with
// the first read counting k.
func TestPipelineMatchesSendsWithCountsInOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	line := func(ms int, acks ...string) string {
		b, err := json.Marshal(map[string]any{"msg": "acks forwarded", "sent": at(ms), "n": len(acks), "acks": acks})
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	}
	dir := t.TempDir()
	logs := []string{dir + "/r0.log", dir + "/r1.log"}
	for i, text := range []string{
		`{"msg":"relay serving"}` + "\n" +
			line(100, "ns 5 ack r1 c 1", "ns 5 ack - c9", "other 5 ack r1 c2") +
			line(300, "ns 5 ack r1 c 1", "ns 6 ack r1 c 1"), // a repeat, then the next stage
		line(200, "ns 5 nack r1 c3", "ns 5 would_nack r1 c4"),
	} {
		if err := os.WriteFile(logs[i], []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sends, ok := forwardedAcks(t, logs, "ns", "r1")
	if !ok {
		t.Fatal("no acks forwarded found")
	}
	if got, want := sends[5], []time.Time{at(100), at(200)}; !slices.Equal(got, want) {
		t.Fatalf("revision 5 sent at %v, want %v", got, want)
	}
	if got, want := sends[6], []time.Time{at(300)}; !slices.Equal(got, want) {
		t.Fatalf("revision 6 sent at %v, want %v", got, want)
	}
	samples := []countSample{
		{at: at(150), rev: 5, reported: 0, inStage: 2},
		{at: at(250), rev: 5, reported: 1, inStage: 2},
		{at: at(400), rev: 5, reported: 2, inStage: 2},
		{at: at(450), rev: 6, reported: 0, inStage: 1},
	}
	lat, uncounted := pipelineLatencies(sends[5], samples, 5)
	if want := []time.Duration{150 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(lat, want) || uncounted != 0 {
		t.Fatalf("latencies %v (%d uncounted), want %v", lat, uncounted, want)
	}
	if lat, uncounted := pipelineLatencies(sends[6], samples, 6); len(lat) != 0 || uncounted != 1 {
		t.Fatalf("revision 6: latencies %v, %d uncounted; want none, 1", lat, uncounted)
	}
	if all, ok := allCounted(samples, 5); !ok || !all.Equal(at(400)) {
		t.Fatalf("all counted at %v, %v; want %v", all, ok, at(400))
	}
}
