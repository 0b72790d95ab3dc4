package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/server/store"
	"github.com/holdfast-dev/holdfast/transport"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// The operator commands reach a config plane in one of two ways: the
// reference server's control API (-server URL, with -token) or etcd
// through holdfast server's store, read directly (-etcd HOST:PORT,...). Both answer with
// the same JSON, which -o json prints as it came.

// tokenEnv is read when -token is not given, so that a token need not
// show in the process list.
const tokenEnv = "HOLDFAST_TOKEN"

// requestTimeout bounds one operator command's requests.
const requestTimeout = 30 * time.Second

// maxReplyBytes bounds a control API reply (a namespace's values).
const maxReplyBytes = 256 << 20

// targetFlags are the flags that name the config plane, and -o.
type targetFlags struct {
	server, token, tokenFile, etcd *string
	// TLS to -server: a private CA, a client certificate (mTLS).
	serverCA, serverCert, serverKey *string
	etcdSec                         *etcdSecurityFlags // nil when serverOnly
	output                          *choice
	// serverOnly: the command has no etcd form (status, clients, rollout).
	serverOnly bool
}

func addTargetFlags(fs *flag.FlagSet, serverOnly bool) *targetFlags {
	t := &targetFlags{serverOnly: serverOnly}
	t.server = fs.String("server", "", "the `URL` of the holdfast server's control API, e.g. http://127.0.0.1:8080")
	t.token = fs.String("token", "", "the bearer `TOKEN` sent to -server (prefer -token-file or $"+tokenEnv+": a flag shows in the process list)")
	t.tokenFile = fs.String("token-file", "", "read the bearer token sent to -server from `FILE` (default: $"+tokenEnv+")")
	t.serverCA = fs.String("ca", "", "trust the CA certificates of PEM `FILE` for an https -server (default: the system's)")
	t.serverCert = fs.String("cert", "", "present the client certificate of PEM `FILE` to -server (mutual TLS; with -key)")
	t.serverKey = fs.String("key", "", "the private key of -cert, PEM `FILE`")
	if serverOnly {
		t.etcd = fs.String("etcd", "", "not for this command: it needs the holdfast server (-server)")
	} else {
		t.etcd = fs.String("etcd", "", "the `HOST:PORT[,HOST:PORT...]` of etcd's members, instead of -server")
		t.etcdSec = addEtcdSecurityFlags(fs)
	}
	t.output = newChoice(fs, "o", "output", "text", "json")
	return t
}

// json reports whether -o json was asked for.
func (t *targetFlags) json() bool { return t.output.value == "json" }

// done reports a write that answers nothing: {} with -o json, else the
// line format and args say.
func (t *targetFlags) done(e *env, format string, args ...any) error {
	if t.json() {
		_, err := fmt.Fprintln(e.stdout, `{}`)
		return err
	}
	_, err := fmt.Fprintf(e.stdout, format+"\n", args...)
	return err
}

// plane is a config plane the operator commands read. Every
// method returns the reply and its JSON, as the API sent it (-o json).
type plane interface {
	history(ctx context.Context, ns string, limit int, before int64) (*controlapi.History, []byte, error)
	// values reads the content live at revision rev, or at time at when
	// it is not zero, or now when rev < 0.
	values(ctx context.Context, ns string, rev int64, at time.Time) (*controlapi.NamespaceValues, []byte, error)
	diff(ctx context.Context, ns string, from, to int64) (*controlapi.Diff, []byte, error)
	close() error
}

// open checks the flags and returns the plane they name. Every error is
// a usage error.
func (t *targetFlags) open(name string) (plane, error) {
	if t.serverOnly && *t.etcd != "" {
		return nil, usagef("-etcd: %s is the holdfast server's alone (it is the store's only writer; etcd keeps no clients' reports or rollouts); use -server", name)
	}
	switch {
	case *t.server != "" && *t.etcd != "":
		return nil, usagef("-server and -etcd exclude each other")
	case *t.etcd != "":
		if *t.token != "" || *t.tokenFile != "" || *t.serverCA != "" || *t.serverCert != "" || *t.serverKey != "" {
			return nil, usagef("-token, -token-file, -ca, -cert and -key are for -server, not -etcd (see -etcd-cacert)")
		}
		eps, err := parseEtcdMembers("-etcd", *t.etcd)
		if err != nil {
			return nil, err
		}
		sec, err := t.etcdSec.security()
		if err != nil {
			return nil, err
		}
		src, err := etcd.New(append(etcdOptions(sec, eps), etcd.WithRequestTimeout(requestTimeout))...)
		if err != nil {
			return nil, usagef("-etcd: %v", err)
		}
		ns, err := store.NewNamespaces(store.NamespacesConfig{Client: src.Client(), RequestTimeout: requestTimeout})
		if err != nil {
			return nil, errors.Join(usagef("-etcd: %v", err), src.Close())
		}
		return &etcdPlane{src: src, ns: ns}, nil
	case *t.server != "":
		if t.etcdSec != nil && t.etcdSec.set() {
			return nil, usagef("-etcd-cacert, -etcd-cert, -etcd-key, -etcd-user and -etcd-password-file are for -etcd, not -server")
		}
		return t.openServer()
	}
	if t.serverOnly {
		return nil, usagef("-server is required")
	}
	return nil, usagef("-server or -etcd is required")
}

// openServer is open for a command that needs the server.
func (t *targetFlags) openServer() (*serverPlane, error) {
	if *t.server == "" {
		return nil, usagef("-server is required")
	}
	if err := checkScheme("-server", *t.server); err != nil {
		return nil, err
	}
	u, err := url.Parse(*t.server)
	switch {
	case err != nil:
		return nil, usagef("-server: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, usagef("-server %q: scheme must be http or https", u.Redacted())
	case u.Host == "":
		return nil, usagef("-server %q has no host", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return nil, usagef("-server %q must not have a query or fragment", u.Redacted())
	}
	token, err := secretFrom("-token", *t.token, "-token-file", *t.tokenFile)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if *t.serverCA != "" || *t.serverCert != "" || *t.serverKey != "" {
		if u.Scheme != "https" {
			return nil, usagef("-ca, -cert and -key are for an https -server")
		}
		tr.TLSClientConfig, err = listen.ClientConfig(*t.serverCA, *t.serverCert, *t.serverKey, slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, usagef("-ca, -cert, -key: %v", err)
		}
	}
	p := &serverPlane{tr: tr, tokenSent: token != ""}
	p.c, err = controlapi.NewClient(*t.server,
		controlapi.WithHTTPClient(&http.Client{Transport: tr}), // withPlane bounds the requests
		controlapi.WithToken(token),
		controlapi.WithUserAgent(version.UserAgent("holdfast-cli")),
		controlapi.WithMaxReplyBytes(maxReplyBytes),
		controlapi.WithReplyHook(p.keep))
	if err != nil {
		return nil, usagef("-server: %v", err)
	}
	return p, nil
}

// checkScheme refuses a URL of flag name (-server, -upstream) without a
// scheme ("127.0.0.1:8080", "origin:8080", "origin"), which url.Parse
// either refuses in its own words ("first path segment in URL cannot
// contain colon") or takes for something else (scheme "origin"), and says
// what to type.
func checkScheme(name, u string) error {
	if strings.Contains(u, "//") {
		return nil
	}
	return usagef("%s %q has no scheme: write http://%s (or https://%s for a TLS listener)", name, u, u, u)
}

// secretFrom returns a secret from the flag named flagName (value), the
// file of the flag named fileFlag (file), or $HOLDFAST_TOKEN, in that
// order of preference; the flag and the file exclude each other. Every
// error is a usage error.
func secretFrom(flagName, value, fileFlag, file string) (string, error) {
	switch {
	case value != "" && file != "":
		return "", usagef("%s and %s exclude each other", flagName, fileFlag)
	case value != "":
		return value, nil
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("%s: %v", fileFlag, err)
		}
		s := strings.TrimSpace(string(data))
		if s == "" {
			return "", usagef("%s: %s is empty", fileFlag, file)
		}
		return s, nil
	}
	return os.Getenv(tokenEnv), nil
}

// serverPlane is the server's control API, through its client.
type serverPlane struct {
	c         *controlapi.Client
	tr        *http.Transport
	tokenSent bool // a bearer token goes with every request

	mu   sync.Mutex
	last []byte // the body of the last reply, for -o json
}

func (p *serverPlane) close() error {
	p.tr.CloseIdleConnections()
	return nil
}

// keep is the client's reply hook: it keeps the body of the last reply.
func (p *serverPlane) keep(_ *http.Response, body []byte) {
	p.mu.Lock()
	p.last = body
	p.mu.Unlock()
}

// reply is the JSON of the last reply, as the server sent it.
func (p *serverPlane) reply() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// replied is a call's reply and the JSON of the last reply, or its err.
func replied[T any](p *serverPlane, v *T, err error) (*T, []byte, error) {
	if err != nil {
		return nil, nil, err
	}
	return v, p.reply(), nil
}

func (p *serverPlane) history(ctx context.Context, ns string, limit int, before int64) (*controlapi.History, []byte, error) {
	h, err := p.c.History(ctx, ns, controlapi.HistoryOptions{Limit: limit, Before: before})
	return replied(p, h, err)
}

func (p *serverPlane) values(ctx context.Context, ns string, rev int64, at time.Time) (*controlapi.NamespaceValues, []byte, error) {
	var v *controlapi.NamespaceValues
	var err error
	switch {
	case !at.IsZero():
		v, err = p.c.ValuesAtTime(ctx, ns, at)
	case rev >= 0:
		v, err = p.c.ValuesAt(ctx, ns, rev)
	default:
		// Now: the namespace's content at the store's head, read in one
		// request after the status that names the head.
		var st *controlapi.NamespaceStatus
		if st, err = p.c.Status(ctx, ns); err == nil {
			v, err = p.c.ValuesAt(ctx, ns, st.Head)
		}
	}
	return replied(p, v, err)
}

func (p *serverPlane) diff(ctx context.Context, ns string, from, to int64) (*controlapi.Diff, []byte, error) {
	d, err := p.c.Diff(ctx, ns, from, to)
	return replied(p, d, err)
}

// apiError is err with a control API error's details one a line, as a
// terminal shows them; a 401 says, in a person's words, whether the token
// was missing or not accepted (tokenSent), and what to do.
func apiError(err error, tokenSent bool) error {
	ae, ok := err.(*controlapi.Error)
	if !ok {
		return err
	}
	if ae.StatusCode == http.StatusUnauthorized {
		return unauthorized(ae, tokenSent)
	}
	if len(ae.Details) == 0 {
		return err
	}
	short := *ae
	short.Details = nil
	return errors.New(short.Error() + "\n\t" + strings.Join(ae.Details, "\n\t"))
}

// unauthorized is the words of a 401: the server's own message says a
// token is needed even when one was sent, as it cannot tell a wrong token
// from none.
func unauthorized(ae *controlapi.Error, tokenSent bool) error {
	if tokenSent {
		return &hintError{err: ae, msg: "token not accepted (revoked, expired or mistyped): the server answered HTTP 401; " +
			"check the token of -token-file, $" + tokenEnv + " or -token, or ask an admin for a new one ('holdfast token create')"}
	}
	return &hintError{err: ae, msg: ae.Error() + "; no token was sent: give one with -token-file FILE or $" + tokenEnv}
}

// hintError is err told in other words (msg), for a person.
type hintError struct {
	msg string
	err error
}

func (e *hintError) Error() string { return e.msg }
func (e *hintError) Unwrap() error { return e.err }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// etcdPlane is etcd, through the etcd source and the server store's
// audit.
type etcdPlane struct {
	src *etcd.Source
	ns  *store.Namespaces
}

func (p *etcdPlane) close() error { return errors.Join(p.ns.Close(), p.src.Close()) }

// reply is v and its JSON, as the server would send it.
func reply[T any](v *T, err error) (*T, []byte, error) {
	if err != nil {
		return nil, nil, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	return v, append(data, '\n'), nil
}

func (p *etcdPlane) history(ctx context.Context, ns string, limit int, before int64) (*controlapi.History, []byte, error) {
	return reply(p.ns.History(ctx, ns, store.HistoryOptions{Limit: limit, Before: before}))
}

func (p *etcdPlane) values(ctx context.Context, ns string, rev int64, at time.Time) (*controlapi.NamespaceValues, []byte, error) {
	switch {
	case !at.IsZero():
		return reply(p.ns.ValuesAtTime(ctx, ns, at))
	case rev >= 0:
		return reply(p.ns.ValuesAt(ctx, ns, rev))
	}
	// Now: at the revision of the namespace's snapshot.
	snap, err := p.src.Snapshot(ctx, transport.SnapshotRequest{Namespace: ns})
	if err != nil {
		return nil, nil, err
	}
	return reply(p.ns.ValuesAt(ctx, ns, snap.Revision))
}

func (p *etcdPlane) diff(ctx context.Context, ns string, from, to int64) (*controlapi.Diff, []byte, error) {
	return reply(p.ns.Diff(ctx, ns, from, to))
}

// withPlane opens the plane t names, runs fn with it under the request
// timeout, and closes it.
func withPlane(ctx context.Context, t *targetFlags, name string, fn func(context.Context, plane) error) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return withPlaneUnbounded(ctx, t, name, fn)
}

// withPlaneUnbounded is withPlane without the request timeout: fn bounds
// its requests itself (rollout status -watch, which runs until the
// rollout ends).
func withPlaneUnbounded(ctx context.Context, t *targetFlags, name string, fn func(context.Context, plane) error) error {
	p, err := t.open(name)
	if err != nil {
		return err
	}
	sp, _ := p.(*serverPlane)
	return errors.Join(apiError(fn(ctx, p), sp != nil && sp.tokenSent), p.close())
}

// withServer is withPlane for a command that needs the server.
func withServer(ctx context.Context, t *targetFlags, name string, fn func(context.Context, *serverPlane) error) error {
	return withPlane(ctx, t, name, func(ctx context.Context, p plane) error {
		return fn(ctx, p.(*serverPlane)) // serverOnly: open refused -etcd
	})
}

// withServerUnbounded is withServer without the request timeout: fn
// bounds each request with requestCtx.
func withServerUnbounded(ctx context.Context, t *targetFlags, name string, fn func(context.Context, *serverPlane) error) error {
	return withPlaneUnbounded(ctx, t, name, func(ctx context.Context, p plane) error {
		return fn(ctx, p.(*serverPlane))
	})
}

// requestCtx bounds one request of a command that runs past
// requestTimeout: each request has it.
func requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, requestTimeout)
}
