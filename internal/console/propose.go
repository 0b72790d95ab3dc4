package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// Proposing a change: a form of the namespace's keys (each value as JSON,
// with a Delete box) and a few empty rows for new keys, and a reason. The
// form is checked on the server and shown again with an error next to
// each field that is wrong (the CSP allows no inline script); a form that
// passes is proposed through the API's POST /control/changes, and the
// browser goes to the change's page.

// newKeyRows is how many empty rows the form offers for new keys.
const newKeyRows = 3

// proposeRow is one row of the form: a key of the namespace (New false)
// or a new one.
type proposeRow struct {
	Index       int
	Key, Value  string
	New, Delete bool
	KeyErr, Err string
}

// proposeForm is the form as the page shows it.
type proposeForm struct {
	NS           string
	Base         int64
	Rows         []proposeRow
	Reason, Link string
	ReasonErr    string
	Error        string // the form's (or the API's) error, above it
}

func (c *Console) proposePage(w http.ResponseWriter, r *http.Request, rq *request) {
	ns := r.PathValue("ns")
	vals, err := c.values(rq, ns, 0)
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	f := proposeForm{NS: ns, Base: vals.Revision}
	keys := make([]string, 0, len(vals.Values))
	for k := range vals.Values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f.Rows = append(f.Rows, proposeRow{Index: len(f.Rows), Key: k, Value: compact(vals.Values[k])})
	}
	for range newKeyRows {
		f.Rows = append(f.Rows, proposeRow{Index: len(f.Rows), New: true})
	}
	c.renderPropose(w, r, rq, http.StatusOK, f)
}

// values reads ns's values at rev (0: its revision now).
func (c *Console) values(rq *request, ns string, rev int64) (controlapi.NamespaceValues, error) {
	if rev <= 0 {
		var st controlapi.NamespaceStatus
		if err := rq.api.do(http.MethodGet, nsPath(ns, "/status"), nil, nil, &st); err != nil {
			return controlapi.NamespaceValues{}, err
		}
		rev = st.Revision
	}
	q := url.Values{"revision": {strconv.FormatInt(rev, 10)}}
	var vals controlapi.NamespaceValues
	err := rq.api.do(http.MethodGet, nsPath(ns, "/values"), q, nil, &vals)
	return vals, err
}

func (c *Console) renderPropose(w http.ResponseWriter, r *http.Request, rq *request, status int, f proposeForm) {
	c.render(w, r, rq, status, "propose", page{Title: "Propose a change to " + f.NS, Nav: "changes", Data: f})
}

// maxProposeForm bounds a proposal's form.
const maxProposeForm = 4 << 20

func (c *Console) propose(w http.ResponseWriter, r *http.Request, rq *request) {
	ns := r.PathValue("ns")
	r.Body = http.MaxBytesReader(w, r.Body, maxProposeForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, rq, http.StatusBadRequest, "the form could not be read: "+err.Error())
		return
	}
	base, err := strconv.ParseInt(r.PostFormValue("base"), 10, 64)
	if err != nil || base < 1 {
		c.fail(w, r, rq, http.StatusBadRequest, "the form lacks the revision it was written against: reload the page")
		return
	}
	// The values the form was written against: a row whose value is
	// unchanged is not part of the change.
	old, err := c.values(rq, ns, base)
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	f, nc := readProposal(r.PostForm, old.Values)
	f.NS, f.Base = ns, base
	nc.BaseRevision = base
	bad := f.ReasonErr != ""
	for _, row := range f.Rows {
		bad = bad || row.Err != "" || row.KeyErr != ""
	}
	if !bad && len(nc.Puts) == 0 && len(nc.Deletes) == 0 {
		f.Error, bad = "nothing changed: edit a value, add a key or delete one", true
	}
	if bad {
		c.renderPropose(w, r, rq, http.StatusUnprocessableEntity, f)
		return
	}
	var ch controlapi.Change
	req := controlapi.ChangeRequest{Reason: f.Reason, Link: f.Link, Namespaces: map[string]controlapi.NamespaceChange{ns: nc}}
	if err := rq.api.do(http.MethodPost, "/control/changes", nil, req, &ch); err != nil {
		// The API's refusal (a blocking lint, a scope, a stale base) is
		// shown above the form, which keeps what was typed.
		status := http.StatusInternalServerError
		if ae := (*apiError)(nil); errors.As(err, &ae) {
			status = ae.Status
		}
		f.Error = err.Error()
		c.renderPropose(w, r, rq, status, f)
		return
	}
	http.Redirect(w, r, "/console/changes/"+url.PathEscape(ch.ID), http.StatusSeeOther)
}

// readProposal reads the form's rows (key.I, value.I, delete.I, new.I
// for I below n) against the values it was written against, and returns
// the form as typed, each error next to its field, and the change.
func readProposal(form url.Values, old map[string]json.RawMessage) (proposeForm, controlapi.NamespaceChange) {
	f := proposeForm{Reason: strings.TrimSpace(form.Get("reason")), Link: strings.TrimSpace(form.Get("link"))}
	if f.Reason == "" {
		f.ReasonErr = "say why: the reason is kept with the change and its revision"
	}
	nc := controlapi.NamespaceChange{Puts: map[string]json.RawMessage{}}
	n, _ := strconv.Atoi(form.Get("n"))
	n = min(max(n, 0), len(old)+newKeyRows+1000)
	seen := map[string]bool{}
	for i := range n {
		is := strconv.Itoa(i)
		row := proposeRow{Index: i, Key: strings.TrimSpace(form.Get("key." + is)), Value: form.Get("value." + is),
			New: form.Get("new."+is) != "", Delete: form.Get("delete."+is) != ""}
		value := strings.TrimSpace(row.Value)
		prev, exists := old[row.Key]
		switch {
		case row.New && row.Key == "" && value == "":
			// An empty row.
		case row.New && row.Key == "":
			row.KeyErr = "name the key"
		case row.New && (exists || seen[row.Key]):
			row.KeyErr = "the namespace already has this key: edit its row"
		case !row.New && !exists:
			row.KeyErr = "this key is no longer in the revision the form was written against: reload the page"
		case row.Delete:
			nc.Deletes = append(nc.Deletes, row.Key)
		case value == "":
			row.Err = "a value is JSON: a number, a string in double quotes, true, false, null, an array or an object"
		default:
			if err := checkJSON(value); err != nil {
				row.Err = "not JSON: " + err.Error()
				break
			}
			if exists && compact(prev) == compact(json.RawMessage(value)) {
				break // unchanged
			}
			nc.Puts[row.Key] = json.RawMessage(value)
		}
		if row.Key != "" {
			seen[row.Key] = true
		}
		f.Rows = append(f.Rows, row)
	}
	if len(nc.Puts) == 0 {
		nc.Puts = nil
	}
	return f, nc
}

// checkJSON reports why s is not one JSON value.
func checkJSON(s string) error {
	var v any
	return json.Unmarshal([]byte(s), &v)
}
