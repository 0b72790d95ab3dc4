package gate

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// ErrNotAllowed is wrapped, with ErrSpec, by the error of a gate whose
// Prometheus URL is under none of the prefixes of the Checker's Allow
// (WithAllow): nothing was fetched.
var ErrNotAllowed = errors.New("gate: the prometheus URL is not allowed")

// Allow is the URL prefixes a gate's Prometheus may be under: a server
// whose rollouts any namespace's control token may start queries only
// the Prometheus servers its operator named, not any URL a spec gives
// (the server's network, its loopback, a cloud's metadata service).
//
// A prefix is an http(s) URL: a URL is under it when it has the same
// scheme, the same host and port (a default port written or not), and a
// path at or below the prefix's, segment by segment, once both are
// cleaned ("/prom" holds "/prom" and "/prom/x", not "/promx" nor
// "/prom/../admin"). The zero Allow allows nothing.
type Allow struct {
	prefixes []allowPrefix
}

type allowPrefix struct {
	scheme, host, path string // path ends with '/'
	text               string
}

// ParseAllow reads -gate-allow's values: each a comma-separated list of
// URL prefixes (http or https, a host, an optional path; no query,
// fragment or credentials).
func ParseAllow(values ...string) (*Allow, error) {
	a := &Allow{}
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			u, err := url.Parse(item)
			switch {
			case err != nil:
				return nil, fmt.Errorf("gate: -gate-allow %q is not a URL: %v", item, err)
			case u.Scheme != "http" && u.Scheme != "https":
				return nil, fmt.Errorf("gate: -gate-allow %q: the scheme must be http or https", item)
			case u.Hostname() == "":
				return nil, fmt.Errorf("gate: -gate-allow %q has no host", item)
			case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
				return nil, fmt.Errorf("gate: -gate-allow %q: a prefix is a scheme, a host and a path, without credentials, query or fragment", item)
			}
			a.prefixes = append(a.prefixes, allowPrefix{scheme: u.Scheme, host: hostKey(u), path: dirPath(u.Path), text: item})
		}
	}
	return a, nil
}

// hostKey is u's host and port, lowercase, with the scheme's default
// port written.
func hostKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

// dirPath is p cleaned, ending with '/'.
func dirPath(p string) string {
	p = path.Clean("/" + p)
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// allows reports whether u is under one of a's prefixes.
func (a *Allow) allows(u *url.URL) bool {
	if a == nil || u.User != nil {
		return false
	}
	host, p := hostKey(u), dirPath(u.Path)
	for _, pre := range a.prefixes {
		if u.Scheme == pre.scheme && host == pre.host && strings.HasPrefix(p, pre.path) {
			return true
		}
	}
	return false
}

// Allows reports whether the URL raw is under one of a's prefixes.
func (a *Allow) Allows(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && a.allows(u)
}

// String is a's prefixes, comma-separated, as given.
func (a *Allow) String() string {
	if a == nil {
		return ""
	}
	s := make([]string, len(a.prefixes))
	for i, p := range a.prefixes {
		s[i] = p.text
	}
	return strings.Join(s, ",")
}

// check is the error of a gate on a Prometheus outside a: one that names
// the URL and what is allowed.
func (a *Allow) check(g Gate) error {
	if a.Allows(g.Prometheus) {
		return nil
	}
	allowed := "none: the server was started without -gate-allow"
	if s := a.String(); s != "" {
		allowed = s
	}
	return fmt.Errorf("%w: %w: prometheus=%s is under no prefix this server queries (-gate-allow: %s)",
		ErrSpec, ErrNotAllowed, g.Prometheus, allowed)
}

// errRedirectNotAllowed refuses a redirect from an allowed Prometheus to
// a URL outside the list.
var errRedirectNotAllowed = errors.New("redirected to a URL outside -gate-allow")

// allowRedirects returns a copy of c that follows a redirect only to a
// URL a allows.
func allowRedirects(c *http.Client, a *Allow) *http.Client {
	out := *c
	next := c.CheckRedirect
	out.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !a.allows(req.URL) {
			return errRedirectNotAllowed
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &out
}
