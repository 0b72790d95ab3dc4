package console

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/authlimit"
	"github.com/holdfast-dev/holdfast/internal/gate"
)

// Sign in and out.

func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Open() {
		http.Redirect(w, r, "/console/namespaces", http.StatusSeeOther)
		return
	}
	c.render(w, r, nil, http.StatusOK, "signin", page{Title: "Sign in"})
}

func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Open() || c.cfg.Authenticator == nil {
		http.Redirect(w, r, "/console/namespaces", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	secret := strings.TrimSpace(r.PostFormValue("token"))
	// The token is counted as the API counts a bearer token: a peer past
	// its failures is refused before the token is looked at.
	probe := r.Clone(r.Context())
	probe.Header = http.Header{"Authorization": {"Bearer " + secret}}
	id, ok, wait, refused := c.cfg.AuthLimit.Authenticate(probe, func(*http.Request) (access.Identity, bool) {
		return c.cfg.Authenticator.Authenticate(secret)
	})
	switch {
	case refused:
		c.render(w, r, nil, http.StatusTooManyRequests, "signin", page{Title: "Sign in", Error: authlimit.Refusal(w, wait)})
		return
	case !ok:
		c.render(w, r, nil, http.StatusUnauthorized, "signin", page{Title: "Sign in", Error: "that token is not accepted"})
		return
	case !mayControl(id):
		c.render(w, r, nil, http.StatusForbidden, "signin", page{Title: "Sign in",
			Error: fmt.Sprintf("token %q has no control scope: the console is for operators", id.Name)})
		return
	}
	// A session the browser had (an open server's, another identity's)
	// ends: a sign-in always starts a new one.
	if _, key, err := c.lookup(r); err == nil {
		_ = c.cfg.Sessions.Delete(r.Context(), key)
	}
	d := sha256.Sum256([]byte(secret))
	if _, err := c.start(w, r, hex.EncodeToString(d[:]), id.Name); err != nil {
		c.fail(w, r, nil, http.StatusServiceUnavailable, "the session store did not answer: "+err.Error())
		return
	}
	c.log.Info("console: signed in", "identity", id.Name)
	http.Redirect(w, r, "/console/namespaces", http.StatusSeeOther)
}

func (c *Console) signout(w http.ResponseWriter, r *http.Request, rq *request) {
	if ck, err := r.Cookie(CookieName); err == nil {
		if err := c.cfg.Sessions.Delete(r.Context(), SessionKey(ck.Value)); err != nil {
			c.fail(w, r, rq, http.StatusServiceUnavailable, "the session store did not answer: "+err.Error())
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/console/", MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	c.log.Info("console: signed out", "identity", rq.name)
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}

// Namespaces.

// pageSize is how many rows a paged table shows.
const pageSize = 100

// namespaceNames lists every namespace the identity controls, from the
// API's namespace index, page by page.
func (c *Console) namespaceNames(rq *request) ([]string, error) {
	var names []string
	q := url.Values{"limit": {strconv.Itoa(controlapi.MaxNamespacesLimit)}}
	for {
		var page controlapi.Namespaces
		if err := rq.api.do(http.MethodGet, "/control/namespaces", q, nil, &page); err != nil {
			return nil, err
		}
		for _, n := range page.Namespaces {
			names = append(names, n.Namespace)
		}
		if page.Next == "" {
			return names, nil
		}
		q.Set("after", page.Next)
	}
}

type nsRow struct {
	controlapi.NamespaceInfo
	Status  controlapi.NamespaceStatus
	Rollout string
}

// namespacesPage lists a page of the namespace index (a prefix filters
// it); the clients behind and nacked are the API's summary of the
// clients, not a status read per row (each would read them all).
func (c *Console) namespacesPage(w http.ResponseWriter, r *http.Request, rq *request) {
	prefix, after := r.URL.Query().Get("q"), r.URL.Query().Get("after")
	q := url.Values{"limit": {strconv.Itoa(pageSize)}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if after != "" {
		q.Set("after", after)
	}
	var idx controlapi.Namespaces
	if err := rq.api.do(http.MethodGet, "/control/namespaces", q, nil, &idx); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	// The clients of each namespace counted by the API (its summary),
	// not read one by one.
	var clients controlapi.Clients
	if err := rq.api.do(http.MethodGet, "/control/clients", url.Values{"limit": {"1"}, "summary": {"1"}}, nil, &clients); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	var counts map[string]controlapi.NamespaceClients
	if clients.Summary != nil {
		counts = clients.Summary.Namespaces
	}
	rows := make([]nsRow, 0, len(idx.Namespaces))
	for _, info := range idx.Namespaces {
		n := counts[info.Namespace]
		row := nsRow{NamespaceInfo: info, Status: controlapi.NamespaceStatus{Revision: info.Revision,
			Live: n.Live, Clients: n.Live, Acked: n.Acked, Nacked: n.Nacked, Behind: n.Behind, Stale: n.Stale}}
		var rl controlapi.RolloutList
		if err := rq.api.do(http.MethodGet, nsPath(info.Namespace, "/rollouts"), nil, nil, &rl); err == nil {
			for _, ro := range rl.Rollouts {
				if ro.State == controlapi.RolloutRunning {
					row.Rollout = ro.ID
				}
			}
		}
		rows = append(rows, row)
	}
	next := ""
	if idx.Next != "" {
		nq := url.Values{"after": {idx.Next}}
		if prefix != "" {
			nq.Set("q", prefix)
		}
		next = "?" + nq.Encode()
	}
	c.render(w, r, rq, http.StatusOK, "namespaces", page{Title: "Namespaces", Nav: "namespaces",
		Data: map[string]any{"Rows": rows, "Filter": prefix, "Next": next, "First": after != ""}})
}

// pager is one page of a paged table.
type pager struct {
	From, To, Total, Page int
	Prev, Next            string // query strings; "" when none
}

func paging(r *http.Request, total int) pager {
	n, _ := strconv.Atoi(r.URL.Query().Get("page"))
	n = max(n, 1)
	p := pager{Total: total, Page: n, From: min((n-1)*pageSize, total)}
	p.To = min(p.From+pageSize, total)
	q := r.URL.Query()
	if n > 1 {
		q.Set("page", strconv.Itoa(n-1))
		p.Prev = "?" + q.Encode()
	}
	if p.To < total {
		q.Set("page", strconv.Itoa(n+1))
		p.Next = "?" + q.Encode()
	}
	return p
}

// historyRow is one revision of a namespace's history with its semantic
// diff against the revision before.
type historyRow struct {
	controlapi.AuditRecord
	Diff []diffLine
}

// historyDiffs bounds the revisions whose diff the namespace page shows.
const historyDiffs = 20

func (c *Console) namespacePage(w http.ResponseWriter, r *http.Request, rq *request) {
	ns := r.PathValue("ns")
	var st controlapi.NamespaceStatus
	if err := rq.api.do(http.MethodGet, nsPath(ns, "/status"), nil, nil, &st); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	q := url.Values{"revision": {strconv.FormatInt(st.Revision, 10)}}
	if rev := r.URL.Query().Get("rev"); rev != "" {
		q.Set("revision", rev)
	}
	var vals controlapi.NamespaceValues
	if err := rq.api.do(http.MethodGet, nsPath(ns, "/values"), q, nil, &vals); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	rows := make([]valueRow, 0, len(vals.Values))
	for k, v := range vals.Values {
		rows = append(rows, newValueRow(k, v))
	}
	slices.SortFunc(rows, func(a, b valueRow) int { return cmp.Compare(a.Key, b.Key) })
	var schemaText string
	var schemaRaw json.RawMessage
	if err := rq.api.do(http.MethodGet, nsPath(ns, "/schema"), nil, nil, &schemaRaw); err == nil {
		var buf bytes.Buffer
		if jsonIndent(&buf, schemaRaw) == nil {
			schemaText = buf.String()
		}
	}
	var h controlapi.History
	if err := rq.api.do(http.MethodGet, nsPath(ns, "/history"), url.Values{"limit": {strconv.Itoa(historyDiffs)}}, nil, &h); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	hist := make([]historyRow, 0, len(h.Revisions))
	for _, rec := range h.Revisions {
		row := historyRow{AuditRecord: rec}
		if rec.PrevRevision == 0 {
			// The namespace's first revision: what it put, all added.
			for _, k := range rec.Puts {
				row.Diff = append(row.Diff, diffLine{Key: k, Kind: "added"})
			}
		} else {
			var d controlapi.Diff
			if err := rq.api.do(http.MethodGet, nsPath(ns, "/diff"), url.Values{"from": {strconv.FormatInt(rec.PrevRevision, 10)},
				"to": {strconv.FormatInt(rec.Revision, 10)}}, nil, &d); err == nil {
				row.Diff = semanticDiff(d.Changes)
			}
		}
		hist = append(hist, row)
	}
	var rl controlapi.RolloutList
	_ = rq.api.do(http.MethodGet, nsPath(ns, "/rollouts"), nil, nil, &rl)
	// The policies and the lints that apply; a server that keeps none
	// (no change store) shows none.
	var pol controlapi.NamespacePolicies
	_ = rq.api.do(http.MethodGet, nsPath(ns, "/policies"), nil, nil, &pol)
	var lints []controlapi.LintInfo
	var ll controlapi.LintList
	if err := rq.api.do(http.MethodGet, "/control/lints", nil, nil, &ll); err == nil {
		for _, l := range ll.Lints {
			if ok, _ := path.Match(l.Namespaces, ns); ok {
				lints = append(lints, l)
			}
		}
	}
	c.render(w, r, rq, http.StatusOK, "namespace", page{Title: ns, Nav: "namespaces", Data: map[string]any{
		"NS": ns, "Status": st, "Values": vals, "Rows": rows, "Schema": schemaText, "History": hist, "Rollouts": rl.Rollouts,
		"AtRevision": r.URL.Query().Get("rev"), "Policies": pol.Policies, "Lints": lints}})
}

func (c *Console) rollback(w http.ResponseWriter, r *http.Request, rq *request) {
	ns := r.PathValue("ns")
	to, err := strconv.ParseInt(r.PostFormValue("to"), 10, 64)
	if err != nil || to < 1 {
		c.fail(w, r, rq, http.StatusBadRequest, "rollback: want the revision to roll back to")
		return
	}
	body := controlapi.RollbackRequest{To: &to, Reason: r.PostFormValue("reason")}
	if rev, err := strconv.ParseInt(r.PostFormValue("if_revision"), 10, 64); err == nil && rev > 0 {
		body.IfRevision = &rev
	}
	err = rq.api.do(http.MethodPost, nsPath(ns, "/rollback"), nil, body, nil)
	var ae *apiError
	if errors.As(err, &ae) && ae.Body.Error == controlapi.CodeApprovalRequired {
		// A policy governs ns: the rollback becomes a change, reviewed
		// and approved as any other.
		c.rollbackAsChange(w, r, rq, ns, to, body.Reason)
		return
	}
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	http.Redirect(w, r, "/console/namespaces/"+url.PathEscape(ns), http.StatusSeeOther)
}

// rollbackAsChange proposes the change that brings ns back to its content
// at store revision to: the keys that differ put back, the keys added
// since deleted, based on ns's revision now.
func (c *Console) rollbackAsChange(w http.ResponseWriter, r *http.Request, rq *request, ns string, to int64, reason string) {
	now, err := c.values(rq, ns, 0)
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	then, err := c.values(rq, ns, to)
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	nc := controlapi.NamespaceChange{BaseRevision: now.Revision, Puts: map[string]json.RawMessage{}}
	for k, v := range then.Values {
		if had, ok := now.Values[k]; !ok || !bytes.Equal(had, v) {
			nc.Puts[k] = v
		}
	}
	for k := range now.Values {
		if _, ok := then.Values[k]; !ok {
			nc.Deletes = append(nc.Deletes, k)
		}
	}
	slices.Sort(nc.Deletes)
	if len(nc.Puts) == 0 && len(nc.Deletes) == 0 {
		c.fail(w, r, rq, http.StatusConflict, fmt.Sprintf("rollback: %s holds at revision %d what it held at %d; nothing to change", ns, now.Revision, to))
		return
	}
	why := fmt.Sprintf("rollback to revision %d", to)
	if reason != "" {
		why += ": " + reason
	}
	var ch controlapi.Change
	req := controlapi.ChangeRequest{Reason: why, Namespaces: map[string]controlapi.NamespaceChange{ns: nc}}
	if err := rq.api.do(http.MethodPost, "/control/changes", nil, req, &ch); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	http.Redirect(w, r, "/console/changes/"+url.PathEscape(ch.ID), http.StatusSeeOther)
}

// Rollouts.

func (c *Console) rolloutsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	names, err := c.namespaceNames(rq)
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	var all []controlapi.RolloutRecord
	for _, n := range names {
		var rl controlapi.RolloutList
		if err := rq.api.do(http.MethodGet, nsPath(n, "/rollouts"), nil, nil, &rl); err == nil {
			all = append(all, rl.Rollouts...)
		}
	}
	slices.SortStableFunc(all, func(a, b controlapi.RolloutRecord) int {
		return cmp.Compare(running(b), running(a))
	})
	c.render(w, r, rq, http.StatusOK, "rollouts", page{Title: "Rollouts", Nav: "rollouts", Data: all})
}

func (c *Console) rolloutPage(w http.ResponseWriter, r *http.Request, rq *request) {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	var rec controlapi.RolloutRecord
	if err := rq.api.do(http.MethodGet, nsPath(ns, "/rollouts/"+url.PathEscape(id)), nil, nil, &rec); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	c.render(w, r, rq, http.StatusOK, "rollout", page{Title: "Rollout " + id, Nav: "rollouts", Data: map[string]any{
		"Rec": rec, "CSRF": rq.sess.CSRF, "Gates": gateResults(rec), "Events": "/console/namespaces/" + url.PathEscape(ns) + "/rollouts/" + url.PathEscape(id) + "/events"}})
}

// gateRow is a gate's last check as the rollout's record keeps it.
type gateRow struct {
	gate.Result
	Value string // the value, "" when the query answered none
}

// gateResults reads each gate's last check from the rollout's record
// (the ones it cannot read are left out).
func gateResults(rec controlapi.RolloutRecord) []gateRow {
	rows := make([]gateRow, 0, len(rec.GateResults))
	for _, raw := range rec.GateResults {
		var row gateRow
		if err := json.Unmarshal(raw, &row.Result); err != nil {
			continue
		}
		if row.HasValue {
			row.Value = strconv.FormatFloat(row.Result.Value, 'g', -1, 64)
		}
		rows = append(rows, row)
	}
	return rows
}

// rolloutEvents pushes the rollout's timeline as it changes.
func (c *Console) rolloutEvents(w http.ResponseWriter, r *http.Request, rq *request) {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	c.push(w, r, rq, "rollout", func(buf *bytes.Buffer) error {
		var rec controlapi.RolloutRecord
		if err := rq.api.do(http.MethodGet, nsPath(ns, "/rollouts/"+url.PathEscape(id)), nil, nil, &rec); err != nil {
			return err
		}
		return c.pages["rollout"].ExecuteTemplate(buf, "timeline", map[string]any{"Rec": rec, "CSRF": rq.sess.CSRF, "Gates": gateResults(rec)})
	})
}

// push serves a live view: server-sent events named event, each the HTML
// render writes, sent when it differs from the last one sent (a comment
// keeps the stream alive otherwise), every Config.Poll, until the
// browser leaves, render fails, or the session ends (signed out, its
// token revoked).
func (c *Console) push(w http.ResponseWriter, r *http.Request, rq *request, event string, render func(*bytes.Buffer) error) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	var last []byte
	tick := time.NewTicker(c.cfg.Poll)
	defer tick.Stop()
	for {
		var buf bytes.Buffer
		if err := render(&buf); err != nil {
			return
		}
		var ev bytes.Buffer
		if bytes.Equal(buf.Bytes(), last) {
			ev.WriteString(": keep-alive\n\n")
		} else {
			last = bytes.Clone(buf.Bytes())
			ev.WriteString("event: " + event + "\n")
			for line := range strings.SplitSeq(buf.String(), "\n") {
				ev.WriteString("data: " + line + "\n")
			}
			ev.WriteString("\n")
		}
		if _, err := w.Write(ev.Bytes()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		if _, _, err := c.lookup(r); err != nil && !rq.open {
			return
		}
		if rq.hasID {
			var d [sha256.Size]byte
			_, _ = hex.Decode(d[:], []byte(rq.sess.TokenDigest))
			if id, ok := c.cfg.Authenticator.AuthenticateDigest(d); !ok || !mayControl(id) {
				return
			}
		}
	}
}

func (c *Console) rolloutAction(w http.ResponseWriter, r *http.Request, rq *request) {
	ns, id, action := r.PathValue("ns"), r.PathValue("id"), r.PathValue("action")
	if action != "abort" && action != "promote" {
		c.fail(w, r, rq, http.StatusNotFound, "no such action: "+action)
		return
	}
	body := controlapi.RolloutActionRequest{Reason: r.PostFormValue("reason")}
	if err := rq.api.do(http.MethodPost, nsPath(ns, "/rollouts/"+url.PathEscape(id)+"/"+action), nil, body, nil); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	http.Redirect(w, r, "/console/namespaces/"+url.PathEscape(ns)+"/rollouts/"+url.PathEscape(id), http.StatusSeeOther)
}

// Fleet.

// fleetView is the fleet page's summary of the clients the query's ns
// and state match: their count, their states counted and their nack
// reasons grouped (the API's summary).
type fleetView struct {
	NS, State string
	Total     int
	States    map[string]int
	Nacks     []controlapi.NackGroup
}

// fleet reads a page of the clients the query matches (offset, limit:
// limit 0 reads none but the summary) and their summary, through the
// API's paging: the console never holds the whole fleet.
func (c *Console) fleet(r *http.Request, rq *request, offset, limit int) (fleetView, []controlapi.ClientState, error) {
	v := fleetView{NS: r.URL.Query().Get("ns"), State: r.URL.Query().Get("state")}
	q := url.Values{"summary": {"1"}, "offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(max(limit, 1))}}
	if v.NS != "" {
		q.Set("ns", v.NS)
	}
	if v.State != "" {
		q.Set("state", v.State)
	}
	var clients controlapi.Clients
	if err := rq.api.do(http.MethodGet, "/control/clients", q, nil, &clients); err != nil {
		return fleetView{}, nil, err
	}
	v.Total = clients.Total
	if clients.Summary != nil {
		v.States, v.Nacks = clients.Summary.States, clients.Summary.Nacks
	}
	if limit == 0 {
		clients.Clients = nil
	}
	return v, clients.Clients, nil
}

func (c *Console) fleetPage(w http.ResponseWriter, r *http.Request, rq *request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("page"))
	n = max(n, 1)
	v, clients, err := c.fleet(r, rq, (n-1)*pageSize, pageSize)
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	pg := paging(r, v.Total)
	events := "/console/fleet/events"
	if r.URL.RawQuery != "" {
		events += "?" + r.URL.RawQuery
	}
	c.render(w, r, rq, http.StatusOK, "fleet", page{Title: "Fleet", Nav: "fleet", Data: map[string]any{
		"View": v, "Clients": clients, "Paging": pg, "Events": events}})
}

// fleetEvents pushes the fleet's summary (states, nack reasons) as it
// changes.
func (c *Console) fleetEvents(w http.ResponseWriter, r *http.Request, rq *request) {
	c.push(w, r, rq, "fleet", func(buf *bytes.Buffer) error {
		v, _, err := c.fleet(r, rq, 0, 0)
		if err != nil {
			return err
		}
		return c.pages["fleet"].ExecuteTemplate(buf, "summary", v)
	})
}

// Audit.

type auditRow struct {
	Namespace string
	controlapi.AuditRecord
}

// auditPerNamespace bounds the records the audit page reads of each
// namespace.
const auditPerNamespace = 50

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, rq *request) {
	qns, actor, kind := r.URL.Query().Get("ns"), r.URL.Query().Get("actor"), r.URL.Query().Get("kind")
	names := []string{qns}
	if qns == "" {
		var err error
		if names, err = c.namespaceNames(rq); err != nil {
			c.failAPI(w, r, rq, err)
			return
		}
	}
	var rows []auditRow
	for _, n := range names {
		var h controlapi.History
		if err := rq.api.do(http.MethodGet, nsPath(n, "/history"), url.Values{"limit": {strconv.Itoa(auditPerNamespace)}}, nil, &h); err != nil {
			continue
		}
		for _, rec := range h.Revisions {
			if actor != "" && rec.Actor != actor || kind != "" && rec.Kind != kind {
				continue
			}
			rows = append(rows, auditRow{Namespace: n, AuditRecord: rec})
		}
	}
	slices.SortFunc(rows, func(a, b auditRow) int { return b.CommittedAt.Compare(a.CommittedAt) })
	pg := paging(r, len(rows))
	c.render(w, r, rq, http.StatusOK, "audit", page{Title: "Audit", Nav: "audit", Data: map[string]any{
		"Rows": rows[pg.From:pg.To], "Paging": pg, "NS": qns, "Actor": actor, "Kind": kind}})
}

// running is 1 for a running rollout, else 0 (to list those first).
func running(r controlapi.RolloutRecord) int {
	if r.State == controlapi.RolloutRunning {
		return 1
	}
	return 0
}
