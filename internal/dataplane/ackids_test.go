package dataplane

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/transport"
)

// post sends body to url with secret.
func post(t *testing.T, c *http.Client, url, secret, body string) (int, string) {
	t.Helper()
	return postAs(t, c, url, secret, "", body)
}

// read GETs url with secret as client id client.
func read(t *testing.T, c *http.Client, url, secret, client string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	if client != "" {
		req.Header.Set(transport.HeaderClientID, client)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestAcksAreBoundToTheIdentityThatRead(t *testing.T) {
	const (
		readerSecret = "s3cret-reader-only-0001"
		svcSecret    = "s3cret-service-0000002"
		relaySecret  = "s3cret-relay-000000003"
	)
	toks, err := access.New(
		access.Token{Name: "reader", Secret: readerSecret, Data: []string{"a.ns"}},
		access.Token{Name: "svc", Secret: svcSecret, Data: []string{"a.ns"}},
		access.Token{Name: "edge", Secret: relaySecret, Data: []string{"*"}, Relay: true},
	)
	if err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	rev := b.publish("a.ns", map[string]any{"k": 1})
	s := b.start(t, WithTokens(toks))
	c := newClient(t)
	ack := func(client string) string {
		return fmt.Sprintf(`{"client_id":%q,"ns":"a.ns","revision":%d,"status":"nack","error":"spoofed"}`, client, rev)
	}

	// The spoof: made-up client ids, never read as.
	for i := 1; i <= 3; i++ {
		if code, body := post(t, c, url(s)+"/sdk/ack", readerSecret, ack(fmt.Sprintf("fake-%d", i))); code != http.StatusForbidden {
			t.Errorf("a nack of a made-up client id: %d %s, want 403", code, body)
		}
	}
	batch := fmt.Sprintf(`{"client_id":"fake-4","acks":[{"ns":"a.ns","revision":%d,"status":"nack","error":"x"},{"client_id":"fake-5","ns":"a.ns","revision":%d,"status":"nack","error":"x"}]}`, rev, rev)
	if code, body := post(t, c, url(s)+"/sdk/ack", readerSecret, batch); code != http.StatusNoContent {
		t.Errorf("a batch of made-up client ids: %d %s, want 204 (dropped)", code, body)
	}
	if got := s.Clients(); len(got) != 0 {
		t.Errorf("spoofed acks recorded: %+v", got)
	}
	if st := s.Bindings(); st.Unbound != 5 {
		t.Errorf("%+v: want 5 acks counted unbound", st)
	}

	// A genuine client: it read as itself, with its token.
	if code := read(t, c, url(s)+"/sdk/snapshot?ns=a.ns", svcSecret, "genuine"); code != http.StatusOK {
		t.Fatalf("snapshot: %d", code)
	}
	if code, body := post(t, c, url(s)+"/sdk/ack", svcSecret, ack("genuine")); code != http.StatusNoContent {
		t.Fatalf("a genuine client's nack: %d %s", code, body)
	}
	// Another token may not speak for it either.
	if code, _ := post(t, c, url(s)+"/sdk/ack", readerSecret, strings.Replace(ack("genuine"), "nack", "ack", 1)); code != http.StatusForbidden {
		t.Errorf("another token's ack for the genuine client: %d, want 403", code)
	}
	got := s.Clients()
	if len(got) != 1 || got[0].ClientID != "genuine" || got[0].NackedRevision != rev {
		t.Errorf("clients %+v: want the genuine client's nack only", got)
	}

	// A relay speaks for its clients; a cohort report needs the relay scope.
	if code, body := post(t, c, url(s)+"/sdk/ack", relaySecret, ack("behind-the-relay")); code != http.StatusNoContent {
		t.Errorf("a relay's ack for its client: %d %s", code, body)
	}
	cohort := fmt.Sprintf(`{"relay_id":"r1","epoch":"e1","parts":[{"ns":"a.ns","revision":%d,"applied":1}]}`, rev)
	if code, body := post(t, c, url(s)+"/sdk/ack/cohort", svcSecret, cohort); code != http.StatusForbidden {
		t.Errorf("a cohort report with a data token: %d %s, want 403", code, body)
	}
}

func TestAcksOfAnOpenServerAreTakenAsBefore(t *testing.T) {
	b := newMemBackend()
	rev := b.publish("a.ns", map[string]any{"k": 1})
	s := b.start(t)
	code, body := post(t, newClient(t), url(s)+"/sdk/ack", "",
		fmt.Sprintf(`{"client_id":"anyone","ns":"a.ns","revision":%d,"status":"ack"}`, rev))
	if code != http.StatusNoContent || len(s.Clients()) != 1 {
		t.Errorf("an open server: %d %s, clients %+v", code, body, s.Clients())
	}
}

func TestBindingsAreBoundedPerIdentity(t *testing.T) {
	b := bindings{max: 10, maxPer: 6}
	b.bind("svc", "pinned", true)
	for i := range 5 {
		b.bind("svc", fmt.Sprint("svc-", i), false)
	}
	// One identity names 100 made-up ids: it churns its own bindings,
	// never another's, never an open stream's.
	for i := range 100 {
		b.bind("flood", fmt.Sprint("fake-", i), false)
	}
	for i := range 5 {
		if !b.bound("svc", fmt.Sprint("svc-", i)) {
			t.Errorf("svc-%d lost its binding to another identity's flood", i)
		}
	}
	if !b.bound("svc", "pinned") || !b.bound("flood", "fake-99") || b.bound("flood", "fake-0") {
		t.Error("want the open stream's binding and the flood's latest kept, its first gone")
	}
	if b.total > 10 {
		t.Errorf("%d bindings, bound 10", b.total)
	}
	// An identity at its bound with every binding open refuses more, counted.
	for i := range 6 {
		b.bind("streams", fmt.Sprint("s-", i), true)
	}
	b.bind("streams", "one-more", true)
	if b.bound("streams", "one-more") {
		t.Error("an identity past its bound with only open streams bound one more")
	}
	for i := range 6 {
		if !b.bound("streams", fmt.Sprint("s-", i)) {
			t.Errorf("s-%d, an open stream's binding, was evicted", i)
		}
	}
	if b.evicted == 0 || b.refused != 1 {
		t.Errorf("evicted %d, refused %d: want both counted", b.evicted, b.refused)
	}
}

// postAs posts body to url with secret, as client id client (when not
// empty).
func postAs(t *testing.T, c *http.Client, url, secret, client, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	if client != "" {
		req.Header.Set(transport.HeaderClientID, client)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAcksBeforeAnyReadAreTaken: a client's ack may reach a server
// before any read of it there (a failover, a restart); naming its own id,
// it binds that id as a read would. An id whose stream is open under
// another identity is not taken over.
func TestAcksBeforeAnyReadAreTaken(t *testing.T) {
	const (
		readerSecret = "s3cret-reader-only-0001"
		svcSecret    = "s3cret-service-0000002"
	)
	toks, err := access.New(
		access.Token{Name: "reader", Secret: readerSecret, Data: []string{"a.ns"}},
		access.Token{Name: "svc", Secret: svcSecret, Data: []string{"a.ns"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	rev := b.publish("a.ns", map[string]any{"k": 1})
	s := b.start(t, WithTokens(toks), WithHeartbeat(time.Hour))
	c := newClient(t)
	nack := func(client string) string {
		return fmt.Sprintf(`{"client_id":%q,"ns":"a.ns","revision":%d,"status":"nack","error":"bad"}`, client, rev)
	}
	clients := func() map[string]int64 {
		m := map[string]int64{}
		for _, cs := range s.Clients() {
			m[cs.ClientID] = cs.NackedRevision
		}
		return m
	}

	// Failed over: never read here, its acks name its own id.
	if code, body := postAs(t, c, url(s)+"/sdk/ack", svcSecret, "moved", nack("moved")); code != http.StatusNoContent {
		t.Errorf("an ack of a client that has not read here yet: %d %s, want 204", code, body)
	}
	batch := fmt.Sprintf(`{"client_id":"moved-2","acks":[{"ns":"a.ns","revision":%d,"status":"nack","error":"bad"},{"client_id":"other","ns":"a.ns","revision":%d,"status":"nack","error":"bad"}]}`, rev, rev)
	if code, body := postAs(t, c, url(s)+"/sdk/ack", svcSecret, "moved-2", batch); code != http.StatusNoContent {
		t.Errorf("a batch of a client that has not read here yet: %d %s, want 204", code, body)
	}
	if got := clients(); got["moved"] != rev || got["moved-2"] != rev || got["other"] != 0 {
		t.Errorf("clients %v: want moved's and moved-2's nacks, not other's (another id than the header's)", got)
	}

	// The spoof: an id whose stream is open under another identity.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url(s)+"/sdk/stream?ns=a.ns:1", nil)
	req.Header.Set("Authorization", "Bearer "+svcSecret)
	req.Header.Set(transport.HeaderClientID, "genuine")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	if code, body := postAs(t, c, url(s)+"/sdk/ack", readerSecret, "genuine", nack("genuine")); code != http.StatusForbidden {
		t.Errorf("a nack for a client whose stream is open under another token: %d %s, want 403", code, body)
	}
	spoof := fmt.Sprintf(`{"client_id":"genuine","acks":[{"ns":"a.ns","revision":%d,"status":"nack","error":"x"}]}`, rev)
	if code, body := postAs(t, c, url(s)+"/sdk/ack", readerSecret, "genuine", spoof); code != http.StatusNoContent {
		t.Errorf("a spoofed batch: %d %s, want 204 (dropped)", code, body)
	}
	if got := clients(); got["genuine"] != 0 {
		t.Errorf("clients %v: a spoofed nack recorded", got)
	}
	if code, body := postAs(t, c, url(s)+"/sdk/ack", svcSecret, "genuine", nack("genuine")); code != http.StatusNoContent {
		t.Errorf("the genuine client's own nack: %d %s", code, body)
	}
	if got := clients(); got["genuine"] != rev {
		t.Errorf("clients %v: want the genuine client's nack", got)
	}
}

// TestAcksUnboundPastTheBoundAreLost: an ack refused for want of a
// binding counts as lost (a rollout of its namespace holds) only while
// the identity's bindings are at their bound, when its client may be
// one the table could not bind; a made-up id's, before, does not.
func TestAcksUnboundPastTheBoundAreLost(t *testing.T) {
	const svcSecret = "s3cret-service-0000002"
	toks, err := access.New(access.Token{Name: "svc", Secret: svcSecret, Data: []string{"a.ns"}})
	if err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	rev := b.publish("a.ns", map[string]any{"k": 1})
	s := b.start(t, WithTokens(toks))
	c := newClient(t)
	start := time.Now().Add(-time.Second)
	ack := func(client string) string {
		return fmt.Sprintf(`{"client_id":%q,"ns":"a.ns","revision":%d,"status":"ack"}`, client, rev)
	}
	s.clients.mu.Lock()
	s.clients.maxPer = 2
	s.clients.mu.Unlock()
	// Not at the bound: an ack naming another id than its sender's is
	// a spoof, not a loss.
	if code, _ := postAs(t, c, url(s)+"/sdk/ack", svcSecret, "sender", ack("made-up")); code != http.StatusForbidden {
		t.Fatalf("a made-up id's ack: %d, want 403", code)
	}
	if n, why := s.Presence().Missing("a.ns", start, "this server"); n != 0 {
		t.Fatalf("a spoof counts as lost: %d, %q", n, why)
	}
	// At the bound, every binding an open stream's: a new client's ack
	// cannot be bound.
	s.clients.bind("svc", "s-0", true)
	s.clients.bind("svc", "s-1", true)
	if code, _ := postAs(t, c, url(s)+"/sdk/ack", svcSecret, "late", ack("late")); code != http.StatusForbidden {
		t.Fatalf("an unbindable client's ack: %d, want 403", code)
	}
	n, why := s.Presence().Missing("a.ns", start, "this server")
	if n != 1 || !strings.Contains(why, "this server dropped 1 outcome(s) of \"a.ns\" of clients its full table of token bindings could not bind") {
		t.Fatalf("missing %d: %q", n, why)
	}
}
