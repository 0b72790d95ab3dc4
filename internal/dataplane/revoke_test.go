package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/peer"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/internal/tokentable"
	"github.com/holdfast-dev/holdfast/transport"
)

// tokenRecord is a store's record of a data token named name over data.
func tokenRecord(name, secret string, data ...string) access.Record {
	return access.Record{Name: name, Hash: access.HashSecret(secret), Scopes: access.Scopes{Data: data}, Created: time.Now()}
}

// openSSE opens url with secret and returns its lines as they come; the
// channel closes when the stream ends.
func openSSE(t *testing.T, c *http.Client, url, secret string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	out := make(chan string, 1024)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	return out
}

// waitLine waits for a line of lines that has want in it.
func waitLine(t *testing.T, lines <-chan string, want string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended before a line with %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q within %v", want, within)
		}
	}
}

// waitEnd waits for lines to close, and returns what came before.
func waitEnd(t *testing.T, lines <-chan string, within time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return got
			}
			got = append(got, l)
		case <-deadline:
			t.Fatalf("the stream is still open after %v (got %q)", within, got)
		}
	}
}

func TestRevocationEndsOpenStreams(t *testing.T) {
	revSecret, otherSecret := access.NewSecret(), access.NewSecret()
	table := tokentable.NewTable()
	other := tokenRecord("other", otherSecret, "*")
	if err := table.SetRecords([]access.Record{tokenRecord("rev", revSecret, "a.ns"), other}, true); err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	b.publish("a.ns", map[string]any{"k": 1})
	s := b.start(t, WithTokens(access.FromAuthenticator(table)), WithHeartbeat(time.Hour))
	c := newClient(t)

	stream := openSSE(t, c, url(s)+"/sdk/stream?ns=a.ns:1", revSecret)
	watch := openSSE(t, c, url(s)+"/sdk/watch?ns=a.ns&since=1", revSecret)
	kept := openSSE(t, c, url(s)+"/sdk/stream?ns=a.ns:1", otherSecret)
	for _, l := range []<-chan string{stream, watch, kept} {
		waitLine(t, l, "event: progress", waitLimit)
	}
	before := s.guardChecks()

	// A change of another token checks none of rev's.
	if err := table.SetRecords([]access.Record{tokenRecord("rev", revSecret, "a.ns"), other, tokenRecord("new", access.NewSecret(), "x")}, true); err != nil {
		t.Fatal(err)
	}
	b.publish("a.ns", map[string]any{"k": 2})
	waitLine(t, stream, `"k":2`, waitLimit)
	if n := s.guardChecks() - before; n != 0 {
		t.Errorf("a new token checked %d open watchers again, want 0", n)
	}
	tracked := s.guardChecks()
	poll := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url(s)+"/sdk/events?ns=a.ns&since=2&wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+revSecret)
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			close(poll)
			return
		}
		poll <- resp
	}()
	for deadline := time.Now().Add(waitLimit); s.Watchers("a.ns") < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("%d watchers of a.ns, want 4", s.Watchers("a.ns"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The long-poll joins the hub before the guard tracks it, and its
	// tracking checks it once: wait for that check, so that only the
	// revocation's are counted below.
	testutil.Eventually(t, waitLimit, func() bool { return s.guardChecks() > tracked }, "the guard to track the long-poll")
	before = s.guardChecks()

	start := time.Now()
	if err := table.SetRecords([]access.Record{other}, true); err != nil { // rev revoked
		t.Fatal(err)
	}
	got := waitEnd(t, stream, 5*time.Second)
	if !strings.Contains(strings.Join(got, "\n"), "event: ended\ndata: {\"ns\":\"a.ns\",\"error\":\"unauthorized\"") {
		t.Errorf("the revoked stream ended without an unauthorized ended event: %q", got)
	}
	waitEnd(t, watch, 5*time.Second)
	select {
	case resp := <-poll:
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("the held long-poll got %d %s, want 401", resp.StatusCode, body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held long-poll is still waiting")
	}
	t.Logf("revoked: every watcher of the token ended in %v", time.Since(start).Round(time.Millisecond))
	if n := s.guardChecks() - before; n != 3 {
		t.Errorf("the revocation checked %d watchers again, want the token's 3", n)
	}

	// The other token's stream goes on.
	b.publish("a.ns", map[string]any{"k": 3})
	waitLine(t, kept, `"k":3`, waitLimit)
}

func TestExpiryEndsOpenStreams(t *testing.T) {
	secret := access.NewSecret()
	table := tokentable.NewTable()
	rec := tokenRecord("brief", secret, "a.ns")
	rec.Expires = time.Now().Add(time.Second)
	if err := table.SetRecords([]access.Record{rec}, true); err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	b.publish("a.ns", map[string]any{"k": 1})
	s := b.start(t, WithTokens(access.FromAuthenticator(table)), WithHeartbeat(time.Hour))
	c := newClient(t)
	stream := openSSE(t, c, url(s)+"/sdk/stream?ns=a.ns:1", secret)
	waitLine(t, stream, "event: progress", waitLimit)
	got := waitEnd(t, stream, 5*time.Second)
	if late := time.Since(rec.Expires); late < 0 || late > 2*time.Second {
		t.Errorf("the stream ended %v after its token's expiry", late)
	}
	if !strings.Contains(strings.Join(got, "\n"), `"error":"unauthorized"`) {
		t.Errorf("the expired stream ended without an unauthorized ended event: %q", got)
	}
}

func TestScopeLossEndsItsNamespaces(t *testing.T) {
	secret := access.NewSecret()
	table := tokentable.NewTable()
	if err := table.SetRecords([]access.Record{tokenRecord("t", secret, "a.ns", "b.ns")}, true); err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	b.publish("a.ns", map[string]any{"k": 1})
	b.publish("b.ns", map[string]any{"k": 1})
	s := b.start(t, WithTokens(access.FromAuthenticator(table)), WithHeartbeat(time.Hour))
	stream := openSSE(t, newClient(t), url(s)+"/sdk/stream?ns=a.ns:2&ns=b.ns:2", secret)
	waitLine(t, stream, "event: progress", waitLimit)
	if err := table.SetRecords([]access.Record{tokenRecord("t", secret, "a.ns")}, true); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(waitEnd(t, stream, 5*time.Second), "\n")
	if !strings.Contains(got, `{"ns":"b.ns","error":"forbidden"`) || strings.Contains(got, `"ns":"a.ns"`) {
		t.Errorf("want b.ns ended forbidden and a.ns not ended (it resumes), got %q", got)
	}
}

func TestCertificateIdentityGoneEndsStreams(t *testing.T) {
	const subject = "CN=deploy-bot,O=example"
	table := tokentable.NewTable()
	cert := access.Record{Name: "deploy-bot", Subject: subject, Scopes: access.Scopes{Data: []string{"a.ns"}}, Created: time.Now()}
	keep := tokenRecord("keep", access.NewSecret(), "*")
	if err := table.SetRecords([]access.Record{cert, keep}, true); err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	b.publish("a.ns", map[string]any{"k": 1})
	s, err := New(b, WithTokens(access.FromAuthenticator(table)), WithHeartbeat(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.out = s.Enqueue
	b.mu.Unlock()
	// What a listener with client CAs does: the verified subject on the
	// request's context.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Handler().ServeHTTP(w, r.WithContext(peer.NewContext(r.Context(), peer.Peer{Subject: subject})))
	}))
	defer hs.Close()
	defer s.Close()
	c := newClient(t)
	stream := openSSE(t, c, hs.URL+"/sdk/stream?ns=a.ns:1", "")
	waitLine(t, stream, "event: progress", waitLimit)
	if err := table.SetRecords([]access.Record{keep}, true); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(waitEnd(t, stream, 5*time.Second), "\n")
	if !strings.Contains(got, `"error":"unauthorized"`) {
		t.Errorf("the certificate's stream ended without an unauthorized ended event: %q", got)
	}
	resp, err := c.Get(hs.URL + "/sdk/snapshot?ns=a.ns")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a new request of the removed identity got %d, want 401", resp.StatusCode)
	}
}

// TestRevocationEndsAckStreams: an ack stream opened before its token
// was revoked takes no line after: the line is not recorded and the
// stream ends.
func TestRevocationEndsAckStreams(t *testing.T) {
	secret, otherSecret := access.NewSecret(), access.NewSecret()
	table := tokentable.NewTable()
	other := tokenRecord("other", otherSecret, "*")
	if err := table.SetRecords([]access.Record{tokenRecord("rev", secret, "a.ns"), other}, true); err != nil {
		t.Fatal(err)
	}
	b := newMemBackend()
	rev := b.publish("a.ns", map[string]any{"k": 1})
	s := b.start(t, WithTokens(access.FromAuthenticator(table)), WithHeartbeat(time.Hour))
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}

	if code := read(t, c, url(s)+"/sdk/snapshot?ns=a.ns", secret, "c1"); code != http.StatusOK {
		t.Fatalf("snapshot: %d", code)
	}
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, _ := http.NewRequest(http.MethodPost, url(s)+transport.PathAckStream, pr)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set(transport.HeaderClientID, "c1")
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ack stream: %d", resp.StatusCode)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	line := func(status string) {
		t.Helper()
		if _, err := fmt.Fprintf(pw, `{"client_id":"c1","acks":[{"ns":"a.ns","revision":%d,"status":%q,"error":"x"}]}`+"\n", rev, status); err != nil {
			t.Fatal(err)
		}
	}
	line("ack")
	testutil.Eventually(t, waitLimit, func() bool {
		got := s.Clients()
		return len(got) == 1 && got[0].AckedRevision == rev
	}, "the ack before the revocation to be recorded")

	if err := table.SetRecords([]access.Record{other}, true); err != nil { // rev revoked
		t.Fatal(err)
	}
	go func() {
		_, _ = fmt.Fprintf(pw, `{"client_id":"c1","acks":[{"ns":"a.ns","revision":%d,"status":"nack","error":"x"}]}`+"\n", rev)
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked token's ack stream is still open")
	}
	if got := s.Clients(); len(got) != 1 || got[0].NackedRevision != 0 {
		t.Errorf("clients %+v: the nack after the revocation was recorded", got)
	}
}
