package gate

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	tests := []struct {
		allow   []string
		url     string
		allowed bool
	}{
		{[]string{"http://prom:9090"}, "http://prom:9090", true},
		{[]string{"http://prom:9090"}, "http://prom:9090/", true},
		{[]string{"http://prom:9090"}, "http://PROM:9090/sub", true},
		{[]string{"http://prom:9090"}, "https://prom:9090", false},
		{[]string{"http://prom:9090"}, "http://prom:9091", false},
		{[]string{"http://prom:9090"}, "http://prom", false},
		{[]string{"http://prom:9090"}, "http://prom:9090.evil.example", false},
		{[]string{"http://prom:9090"}, "http://prom:9090@evil.example", false},
		{[]string{"http://prom:9090"}, "http://evil.example/http://prom:9090", false},
		{[]string{"http://prom"}, "http://prom:80", true},
		{[]string{"https://prom:443"}, "https://prom", true},
		{[]string{"http://prom/thanos"}, "http://prom/thanos", true},
		{[]string{"http://prom/thanos/"}, "http://prom/thanos/eu", true},
		{[]string{"http://prom/thanos"}, "http://prom/thanosx", false},
		{[]string{"http://prom/thanos"}, "http://prom/thanos/../admin", false},
		{[]string{"http://prom/thanos"}, "http://prom/thanos/%2e%2e/admin", false},
		{[]string{"http://prom/thanos"}, "http://prom/", false},
		{[]string{"http://a:1,http://b:2", "http://c:3"}, "http://b:2", true},
		{[]string{"http://a:1,http://b:2", "http://c:3"}, "http://c:3", true},
		{[]string{"http://a:1,http://b:2", "http://c:3"}, "http://d:4", false},
		{nil, "http://prom:9090", false},
		{[]string{""}, "http://prom:9090", false},
		{[]string{"http://127.0.0.1:9090"}, "http://127.0.0.1:9090", true},
		{[]string{"http://127.0.0.1:9090"}, "http://localhost:9090", false},
	}
	for _, tt := range tests {
		a, err := ParseAllow(tt.allow...)
		if err != nil {
			t.Fatalf("ParseAllow(%q): %v", tt.allow, err)
		}
		if got := a.Allows(tt.url); got != tt.allowed {
			t.Errorf("-gate-allow %q: Allows(%q) = %v, want %v", tt.allow, tt.url, got, tt.allowed)
		}
	}
	for _, bad := range []string{"prom:9090", "ftp://prom", "http://", "http://u:p@prom", "http://prom?x=1", "http://prom#f", "http://[::1"} {
		if _, err := ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q) accepted it", bad)
		}
	}
}

// TestCheckerOutsideAllow: a gate on a URL outside its Allow is refused
// when it is built, with ErrNotAllowed and ErrSpec and a message naming
// the URL and the list, and nothing is fetched; one inside is checked.
func TestCheckerOutsideAllow(t *testing.T) {
	p := newFakeProm(t)
	p.set(http.StatusOK, vector("1"))
	other := newFakeProm(t)
	allow, err := ParseAllow(p.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		allow *Allow
		want  string
	}{
		{allow, "(-gate-allow: " + p.srv.URL + ")"},
		{nil, "(-gate-allow: none: the server was started without -gate-allow)"},
		{&Allow{}, "(-gate-allow: none: the server was started without -gate-allow)"},
	} {
		_, err := FromJSON([]byte(`{"prometheus":"`+other.srv.URL+`","query":"up","max":1}`), nil, WithAllow(tt.allow))
		if !errors.Is(err, ErrNotAllowed) || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), other.srv.URL) ||
			!strings.Contains(err.Error(), tt.want) {
			t.Errorf("a gate outside %q: %v", tt.allow, err)
		}
	}
	if len(other.queries) > 0 {
		t.Errorf("a refused gate fetched: %q", other.queries)
	}
	b, err := FromJSON([]byte(`{"prometheus":"`+p.srv.URL+`","query":"up","max":1}`), nil, WithAllow(allow))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(context.Background()); err != nil {
		t.Errorf("a gate inside the list: %v", err)
	}
}

// TestRedirectOutsideAllow: an allowed URL that redirects elsewhere is
// not followed there.
func TestRedirectOutsideAllow(t *testing.T) {
	inside := newFakeProm(t)
	inside.set(http.StatusOK, vector("1"))
	outside := newFakeProm(t)
	outside.set(http.StatusOK, vector("1"))
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := outside.srv.URL
		if r.URL.Query().Get("query") == "inside" {
			target = inside.srv.URL
		}
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusFound)
	}))
	defer redirect.Close()
	allow, err := ParseAllow(redirect.URL, inside.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"outside", "inside"} {
		c, err := NewChecker(Gate{Prometheus: redirect.URL, Query: q, Max: 5}, WithAllow(allow), WithHTTPClient(http.DefaultClient))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Start(context.Background(), time.Now())
		c.Close()
		if (err == nil) != (q == "inside") {
			t.Errorf("a redirect %s the list: %v", q, err)
		}
	}
	if len(outside.queries) > 0 {
		t.Errorf("followed a redirect outside the list: %q", outside.queries)
	}
	if len(inside.queries) != 1 {
		t.Errorf("the redirect inside the list: %d queries", len(inside.queries))
	}
}

// TestErrorsShowNoReply: whatever a URL that is not Prometheus answers
// is never in the gate's error, and every way of not answering (a closed
// port, an open one that speaks no HTTP, one that never answers) gives
// one message.
func TestErrorsShowNoReply(t *testing.T) {
	const secret = "INTERNAL-SECRET-PAGE db_password=hunter2"
	page := func(status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(secret))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	listener := func(serve func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go serve(c)
			}
		}()
		return "http://" + ln.Addr().String()
	}
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return "http://" + ln.Addr().String()
	}()
	notHTTP := listener(func(c net.Conn) {
		_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6 " + secret + "\r\n"))
		c.Close()
	})
	silent := listener(func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c) // until the client gives up
		c.Close()
	})
	errorOf := func(url string) string {
		c, err := NewChecker(Gate{Prometheus: url, Query: "up", Max: 1}, WithTimeout(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r, err := c.Check(context.Background(), time.Now())
		if err != nil || r.Err == nil {
			t.Fatalf("%s: %v %+v", url, err, r)
		}
		return r.Err.Error()
	}
	noAnswer := map[string]string{}
	for name, url := range map[string]string{
		"403 page": page(http.StatusForbidden), "500 page": page(http.StatusInternalServerError), "200 page": page(http.StatusOK),
		"closed port": closed, "not HTTP": notHTTP, "silent": silent,
	} {
		msg := errorOf(url)
		if strings.Contains(msg, "SECRET") || strings.Contains(msg, "hunter2") || strings.Contains(msg, "SSH") {
			t.Errorf("%s: the error shows the reply: %s", name, msg)
		}
		if strings.HasPrefix(name, "closed") || name == "not HTTP" || name == "silent" {
			noAnswer[name] = msg
		}
	}
	if noAnswer["closed port"] != noAnswer["not HTTP"] || noAnswer["closed port"] != noAnswer["silent"] {
		t.Errorf("ports told apart: %q", noAnswer)
	}
}
