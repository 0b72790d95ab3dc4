// Package console is the operator's console: server-rendered pages under
// /console/ over the control API's handler (docs/CONSOLE.md). It adds no
// write path of its own: every read and write is a request to the control
// API, served in process with the signed-in identity on its context, so
// the scopes, checks and audit are the API's.
//
// Each page is one handler and one template (templates/NAME.html in the
// layout of templates/layout.html). Pages read without JavaScript; the
// rollout's timeline updates by server push (htmx's SSE extension,
// vendored under static/ with its licence); so does the fleet's summary.
package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Defaults of Config.
const (
	DefaultSessionTTL = 8 * time.Hour
	DefaultPoll       = time.Second
	// CookieName is the session cookie's name; its path is /console/, so
	// that a browser never sends it to /control/ (which reads no cookie).
	CookieName = "holdfast_console"
	// CSRFHeader carries the session's CSRF token on htmx requests.
	CSRFHeader = "X-CSRF-Token"
)

// Authenticator authenticates a token at sign-in (Authenticate) and
// re-checks a session's token by its digest on every request
// (AuthenticateDigest): *access.Tokens is one.
type Authenticator interface {
	Authenticate(secret string) (access.Identity, bool)
	AuthenticateDigest(d [sha256.Size]byte) (access.Identity, bool)
}

// Config configures a Console.
type Config struct {
	// API is the control API's handler (controlplane.Handler).
	API http.Handler
	// Authenticator authenticates tokens; nil: the server is open.
	Authenticator Authenticator
	// Open, when set, reports whether the server is open (no tokens: a
	// store that has never had an admin token); nil: open when
	// Authenticator is nil.
	Open func() bool
	// AuthLimit slows down a peer that keeps signing in with tokens that
	// are not accepted, as the API's (share the server's). Nil: none.
	AuthLimit *authlimit.Limiter
	// Sessions keeps the sessions (default NewMemorySessions()).
	Sessions SessionStore
	// SessionTTL is how long a session lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// Poll is how often a live view looks for changes (default
	// DefaultPoll).
	Poll   time.Duration
	Logger *slog.Logger
}

// Console serves /console/.
type Console struct {
	cfg   Config
	log   *slog.Logger
	pages map[string]*template.Template
	h     http.Handler
}

// New returns the console over cfg.API.
func New(cfg Config) (*Console, error) {
	if cfg.API == nil {
		return nil, errors.New("console: nil API handler")
	}
	if cfg.Sessions == nil {
		cfg.Sessions = NewMemorySessions()
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Open == nil {
		open := cfg.Authenticator == nil
		cfg.Open = func() bool { return open }
	}
	c := &Console{cfg: cfg, log: cfg.Logger}
	if err := c.parse(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /console/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/namespaces", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /console/signin", c.signinPage)
	mux.HandleFunc("POST /console/signin", c.signin)
	mux.HandleFunc("POST /console/signout", c.session(c.signout))
	mux.HandleFunc("GET /console/namespaces", c.session(c.namespacesPage))
	mux.HandleFunc("GET /console/namespaces/{ns}", c.session(c.namespacePage))
	mux.HandleFunc("POST /console/namespaces/{ns}/rollback", c.session(c.rollback))
	mux.HandleFunc("GET /console/namespaces/{ns}/propose", c.session(c.proposePage))
	mux.HandleFunc("POST /console/namespaces/{ns}/propose", c.session(c.propose))
	mux.HandleFunc("GET /console/changes", c.session(c.changesPage))
	mux.HandleFunc("GET /console/changes/events", c.session(c.changesEvents))
	mux.HandleFunc("GET /console/changes/{id}", c.session(c.changePage))
	mux.HandleFunc("POST /console/changes/{id}/{action}", c.session(c.changeAction))
	mux.HandleFunc("GET /console/rollouts", c.session(c.rolloutsPage))
	mux.HandleFunc("GET /console/namespaces/{ns}/rollouts/{id}", c.session(c.rolloutPage))
	mux.HandleFunc("GET /console/namespaces/{ns}/rollouts/{id}/events", c.session(c.rolloutEvents))
	mux.HandleFunc("POST /console/namespaces/{ns}/rollouts/{id}/{action}", c.session(c.rolloutAction))
	mux.HandleFunc("GET /console/fleet", c.session(c.fleetPage))
	mux.HandleFunc("GET /console/fleet/events", c.session(c.fleetEvents))
	mux.HandleFunc("GET /console/audit", c.session(c.auditPage))
	mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	// Cross-origin unsafe requests (Sec-Fetch-Site, Origin) are refused
	// before any handler; the session's CSRF token is checked besides.
	c.h = securityHeaders(http.NewCrossOriginProtection().Handler(mux))
	return c, nil
}

// ServeHTTP serves /console/... requests.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.h.ServeHTTP(w, r) }

// csp is the pages' Content-Security-Policy: scripts and styles from the
// console itself only (no inline script, no eval), nothing framed.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// request is one console request's session and its API caller.
type request struct {
	sess  Session
	name  string // the identity's name
	open  bool
	api   caller
	id    access.Identity
	hasID bool
}

// session wraps a page: it finds the request's session (an open server
// starts one without a token), re-checks its token, and checks the CSRF
// token of a POST.
func (c *Console) session(fn func(w http.ResponseWriter, r *http.Request, rq *request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		open := c.cfg.Open()
		sess, key, err := c.lookup(r)
		switch {
		case err != nil && !errors.Is(err, ErrNoSession):
			c.fail(w, r, nil, http.StatusServiceUnavailable, "the session store did not answer: "+err.Error())
			return
		case err != nil && !open, err == nil && !open && sess.TokenDigest == "":
			c.toSignin(w, r)
			return
		case err != nil:
			// An open server: a session without a token, for the CSRF
			// token of its forms.
			if r.Method != http.MethodGet {
				c.fail(w, r, nil, http.StatusForbidden, "no session: reload the page")
				return
			}
			if sess, err = c.start(w, r, "", access.Anonymous); err != nil {
				c.fail(w, r, nil, http.StatusServiceUnavailable, "the session store did not answer: "+err.Error())
				return
			}
		}
		rq := &request{sess: sess, name: sess.Name, open: open, api: caller{api: c.cfg.API, ctx: r.Context()}}
		if sess.TokenDigest != "" {
			var d [sha256.Size]byte
			if n, err := hex.Decode(d[:], []byte(sess.TokenDigest)); err != nil || n != len(d) || c.cfg.Authenticator == nil {
				c.toSignin(w, r)
				return
			}
			id, ok := c.cfg.Authenticator.AuthenticateDigest(d)
			if !ok || !mayControl(id) {
				// Revoked, expired or stripped of its control scope:
				// the session ends with it.
				_ = c.cfg.Sessions.Delete(r.Context(), key)
				c.toSignin(w, r)
				return
			}
			rq.id, rq.hasID, rq.name = id, true, id.Name
			rq.api.id = &rq.id
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			got := r.Header.Get(CSRFHeader)
			if got == "" {
				got = r.PostFormValue("csrf")
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) != 1 {
				c.fail(w, r, rq, http.StatusForbidden, "this form's CSRF token is not the session's: reload the page and try again")
				return
			}
		}
		fn(w, r, rq)
	}
}

// mayControl reports whether id may use the console: a control or admin
// scope (a token with data scope only may not sign in).
func mayControl(id access.Identity) bool { return id.HasControl() || id.IsAdmin() }

// lookup returns the request's session and its store key.
func (c *Console) lookup(r *http.Request) (Session, string, error) {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		return Session{}, "", ErrNoSession
	}
	key := SessionKey(ck.Value)
	sess, err := c.cfg.Sessions.Get(r.Context(), key)
	return sess, key, err
}

// start begins a session (tokenDigest "" on an open server) and sets its
// cookie.
func (c *Console) start(w http.ResponseWriter, r *http.Request, tokenDigest, name string) (Session, error) {
	id := newSecret()
	now := time.Now().UTC()
	sess := Session{TokenDigest: tokenDigest, Name: name, CSRF: newSecret(), Created: now, Expires: now.Add(c.cfg.SessionTTL)}
	if err := c.cfg.Sessions.Create(r.Context(), SessionKey(id), sess); err != nil {
		return Session{}, err
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/console/", Expires: sess.Expires,
		MaxAge: int(c.cfg.SessionTTL / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return sess, nil
}

func (c *Console) toSignin(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("HX-Request") != "" || r.Method != http.MethodGet {
		c.fail(w, r, nil, http.StatusUnauthorized, "not signed in")
		return
	}
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}
