package relay_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/relay"
	"github.com/holdfast-dev/holdfast/transport"
)

// TestSpoofedNacksChangeNoRollout is the attack suite's case of acks
// not bound to who sends them: a data-only token nacks a rollout that
// allows 2 nacks under made-up client ids, singly and in batches, at a
// relay with tokens and at the origin: the rollout runs on, nothing of
// the spoof recorded. Then the same token reads as three made-up ids
// (binding them to itself) and nacks under each, through the relay and
// at the origin: one token is one nacker, and the rollout runs on. The
// baseline, in the same run: three clients with tokens of their own
// that read as themselves through the relay nack, and the rollout
// reverts.
func TestSpoofedNacksChangeNoRollout(t *testing.T) {
	const (
		readerSecret = "s3cret-reader-data-only-01"
		svcSecret    = "s3cret-service-data-only-2"
		svc2Secret   = "s3cret-service2-data-only-"
		svc3Secret   = "s3cret-service3-data-only-"
		edgeSecret   = "s3cret-edge-relay-scope-03"
		opsSecret    = "s3cret-ops-control-all-004"
		ns           = "spoof.ns"
	)
	toks, err := access.New(
		access.Token{Name: "reader", Secret: readerSecret, Data: []string{"spoof.*"}},
		access.Token{Name: "svc", Secret: svcSecret, Data: []string{"spoof.*"}},
		access.Token{Name: "svc2", Secret: svc2Secret, Data: []string{"spoof.*"}},
		access.Token{Name: "svc3", Secret: svc3Secret, Data: []string{"spoof.*"}},
		access.Token{Name: "edge", Secret: edgeSecret, Data: []string{"*"}, Relay: true},
		access.Token{Name: "ops", Secret: opsSecret, Control: []string{"*"}, Data: []string{"*"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond), holdfasttest.WithTokens(toks))
	mustPublish(t, origin, ns, map[string]any{"base": 1})
	_, relayURL := startRelay(t, origin.URL(), withSource(upstream(t, origin.URL(), edgeSecret)), relay.WithTokens(toks))

	call := func(method, url, secret, client, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		if client != "" {
			req.Header.Set(transport.HeaderClientID, client)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := call("POST", origin.URL()+"/control/namespaces/"+ns+"/rollouts", opsSecret, "",
		`{"puts":{"feature":true},"stages":[100],"max_nacks":2,"bake":"1h","report_timeout":"1h","stage_timeout":"1h"}`)
	var ro struct {
		ID       string `json:"id"`
		Revision int64  `json:"revision"`
	}
	if code != http.StatusOK && code != http.StatusCreated || json.Unmarshal([]byte(body), &ro) != nil || ro.ID == "" {
		t.Fatalf("start the rollout: %d %s", code, body)
	}
	state := func() (string, int) {
		_, body := call("GET", origin.URL()+"/control/namespaces/"+ns+"/rollouts/"+ro.ID, opsSecret, "", "")
		var r struct {
			State  string `json:"state"`
			Nacked int    `json:"nacked"`
		}
		_ = json.Unmarshal([]byte(body), &r)
		return r.State, r.Nacked
	}
	nack := func(client string) string {
		return fmt.Sprintf(`{"client_id":%q,"ns":%q,"revision":%d,"status":"nack","rollout":%q,"error":"spoofed"}`, client, ns, ro.Revision, ro.ID)
	}
	batch := func(clients ...string) string {
		var parts []string
		for _, c := range clients {
			parts = append(parts, fmt.Sprintf(`{"client_id":%q,"ns":%q,"revision":%d,"status":"nack","rollout":%q,"error":"spoofed"}`, c, ns, ro.Revision, ro.ID))
		}
		return fmt.Sprintf(`{"client_id":%q,"acks":[%s]}`, clients[0], strings.Join(parts, ","))
	}

	// The attack, at the relay and at the origin.
	for _, base := range []string{relayURL, origin.URL()} {
		for i := 1; i <= 3; i++ {
			if code, body := call("POST", base+"/sdk/ack", readerSecret, "", nack(fmt.Sprint("fake-", i))); code != http.StatusForbidden {
				t.Errorf("%s: a nack of made-up client fake-%d: %d %s, want 403", base, i, code, body)
			}
		}
		if code, body := call("POST", base+"/sdk/ack", readerSecret, "", batch("fake-4", "fake-5", "fake-6")); code != http.StatusNoContent {
			t.Errorf("%s: a batch of made-up clients: %d %s, want 204 (dropped)", base, code, body)
		}
		// Nor may it speak for a relay's clients.
		cohort := fmt.Sprintf(`{"relay_id":"r","epoch":"e","parts":[{"ns":%q,"revision":%d,"rollout":%q,"nacked":3}]}`, ns, ro.Revision, ro.ID)
		if code, body := call("POST", base+"/sdk/ack/cohort", readerSecret, "", cohort); code != http.StatusForbidden {
			t.Errorf("%s: a cohort report with a data token: %d %s, want 403", base, code, body)
		}
	}
	time.Sleep(time.Second) // what the relay would have forwarded
	if st, nacked := state(); st != "running" || nacked != 0 {
		t.Fatalf("after the spoof the rollout is %s with %d nacks, want running with none", st, nacked)
	}
	for _, cs := range origin.Clients() {
		if strings.HasPrefix(cs.ClientID, "fake-") {
			t.Errorf("a spoofed client recorded: %+v", cs)
		}
	}

	// The token binds made-up ids by reading as them, and nacks under
	// each: through the relay (which forwards its clients' identities)
	// and at the origin. Counted, each, but as one nacker.
	for b, base := range []string{relayURL, origin.URL()} {
		for i := 1; i <= 3; i++ {
			client := fmt.Sprintf("made-up-%d-%d", b, i)
			if code, body := call("GET", base+"/sdk/snapshot?ns="+ns, readerSecret, client, ""); code != http.StatusOK {
				t.Fatalf("%s reads as %s: %d %s", base, client, code, body)
			}
			if code, body := call("POST", base+"/sdk/ack", readerSecret, "", nack(client)); code != http.StatusNoContent {
				t.Fatalf("%s: %s nacks: %d %s", base, client, code, body)
			}
		}
	}
	testutil.Eventually(t, waitLimit, func() bool {
		_, nacked := state()
		return nacked >= 6
	}, "the made-up ids' nacks to be heard")
	if st, nacked := state(); st != "running" {
		t.Fatalf("after one token's nacks under 6 ids the rollout is %s (%d nacks), want running", st, nacked)
	}

	// The baseline: genuine clients with tokens of their own, each read
	// as itself, nack through the relay; max_nacks is breached.
	for i, secret := range []string{svcSecret, svc2Secret, svc3Secret} {
		client := fmt.Sprint("genuine-", i)
		if code, body := call("GET", relayURL+"/sdk/snapshot?ns="+ns, secret, client, ""); code != http.StatusOK {
			t.Fatalf("%s reads: %d %s", client, code, body)
		}
		if code, body := call("POST", relayURL+"/sdk/ack", secret, "", nack(client)); code != http.StatusNoContent {
			t.Fatalf("%s nacks: %d %s", client, code, body)
		}
	}
	testutil.Eventually(t, waitLimit, func() bool {
		st, _ := state()
		return st != "running"
	}, "the genuine nacks to end the rollout")
	st, nacked := state()
	t.Logf("after 3 genuine nacks: %s, %d clients nacked", st, nacked)
	if st != "reverted" {
		t.Errorf("the rollout is %s, want reverted", st)
	}
}

// TestWrongTokenFloodIsSlowed is the attack suite's case of wrong tokens
// answered without back-off: one peer floods a relay with wrong tokens
// for 2 s, beside a healthy client with the right one from another
// address. The flood is refused (429) past its burst, what the relay
// looked at bounded by the limit's rate; every healthy snapshot is
// served, its p99 within max(2× its quiet baseline, 100 ms). As the
// suite's attacks are, a try whose p99 alone crosses the bound is
// measured again, baseline and all (attackTries).
func TestWrongTokenFloodIsSlowed(t *testing.T) {
	var problem string
	for try := 1; try <= attackTries; try++ {
		// A try of its own: its origin and relay stop before the next.
		t.Run(fmt.Sprint("try-", try), func(t *testing.T) { problem = wrongTokenFloodOnce(t) })
		if problem == "" {
			return
		}
		t.Logf("try %d of %d: %s", try, attackTries, problem)
	}
	t.Errorf("in each of %d tries; the last: %s", attackTries, problem)
}

// wrongTokenFloodOnce is one measurement of TestWrongTokenFloodIsSlowed:
// what it finds wrong of the refusals fails t; a healthy p99 past its
// bound is returned, to be measured again.
func wrongTokenFloodOnce(t *testing.T) (latency string) {
	origin := holdfasttest.NewServer(t, holdfasttest.WithHeartbeat(200*time.Millisecond), holdfasttest.WithTokens(accessTokens(t)))
	mustPublish(t, origin, "payments.prod", map[string]any{"v": 1})
	_, relayURL := startRelay(t, origin.URL(), withSource(upstream(t, origin.URL(), edgeSecret)), relay.WithTokens(accessTokens(t)))
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		tr := &http.Transport{DialContext: d.DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	// get may run beside the test's goroutine: it returns its error.
	get := func(c *http.Client, secret string) (int, time.Duration, error) {
		req, _ := http.NewRequest("GET", relayURL+"/sdk/snapshot?ns=payments.prod", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start), nil
	}
	healthy := from("127.0.0.1")
	measure := func(stop <-chan struct{}) (lat []time.Duration) {
		for {
			select {
			case <-stop:
				return lat
			default:
			}
			code, d, err := get(healthy, paymentsSecret)
			if err != nil || code != http.StatusOK {
				t.Errorf("a healthy snapshot: %d %v", code, err)
				return lat
			}
			lat = append(lat, d)
			time.Sleep(5 * time.Millisecond)
		}
	}
	quiet := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(quiet) })
	base := p99(measure(quiet))

	stop := make(chan struct{})
	codes := map[int]int{}
	attackErr := make(chan error, 1)
	go func() {
		defer close(attackErr)
		attacker := from("127.0.0.3")
		for {
			select {
			case <-stop:
				return
			default:
			}
			code, _, err := get(attacker, "s3cret-wrong-token-guess-00")
			if err != nil {
				attackErr <- err
				return
			}
			codes[code]++
		}
	}()
	start := time.Now()
	time.AfterFunc(2*time.Second, func() { close(stop) })
	under := p99(measure(stop))
	if err := <-attackErr; err != nil { // closed once the attacker is done
		t.Errorf("the flood's request: %v", err)
	}
	elapsed := time.Since(start)
	t.Logf("flood for %v: %v; healthy snapshot p99 %v (quiet %v)", elapsed.Round(time.Millisecond), codes, under, base)
	if limit := 30 + int(5*elapsed.Seconds()) + 2; codes[http.StatusUnauthorized] > limit {
		t.Errorf("%d wrong tokens looked at in %v, want at most %d", codes[http.StatusUnauthorized], elapsed, limit)
	}
	if codes[http.StatusTooManyRequests] == 0 {
		t.Error("the flood was never refused with 429")
	}
	if bound := max(2*base, 100*time.Millisecond); under > bound {
		return fmt.Sprintf("healthy snapshot p99 %v under the flood, quiet %v: want at most %v", under, base, bound)
	}
	return ""
}
