package controlplane

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/lint"
	"github.com/holdfast-dev/holdfast/transport"
)

// Bounds of POST /control/lints/{name}/test: the revisions of history it
// runs over by default and at most.
const (
	DefaultLintTestRevisions = 100
	MaxLintTestRevisions     = 1000
)

// lintCache keeps the lints compiled, by name and spec, so that running
// the lints of a request compiles none that is unchanged.
type lintCache struct {
	mu sync.Mutex
	// compiled maps lintKey to the lint compiled (nil: it does not
	// compile, which a lint saved through the API always does).
	compiled map[string]*lint.Lint
}

// lintKey is a lint's key in the cache: its name and its spec's JSON.
func lintKey(name string, spec controlapi.Lint) string {
	b, _ := json.Marshal(spec) // a struct of strings and raw JSON
	return name + "\x00" + string(b)
}

// lintsFor returns the compiled lints that apply to namespace ns, sorted
// by name (none without a LintStore).
func (h *Handler) lintsFor(ctx context.Context, ns string) ([]*lint.Lint, error) {
	if h.cfg.Lints == nil {
		return nil, nil
	}
	specs, err := h.cfg.Lints.Lints(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(specs))
	for name := range specs {
		names = append(names, name)
	}
	slices.Sort(names)
	c := &h.lintCache
	c.mu.Lock()
	defer c.mu.Unlock()
	// The cache is rebuilt of the lints stored now: one changed or
	// deleted leaves it.
	next := make(map[string]*lint.Lint, len(specs))
	var out []*lint.Lint
	for _, name := range names {
		spec := specs[name]
		key := lintKey(name, spec)
		l, ok := c.compiled[key]
		if !ok {
			if l, err = lint.Compile(name, spec); err != nil {
				h.log.Warn("control: a stored lint does not compile; it is not run", "lint", name, "err", err)
				l = nil
			}
		}
		next[key] = l
		if l != nil && l.Applies(ns) {
			out = append(out, l)
		}
	}
	c.compiled = next
	return out, nil
}

func (h *Handler) lintStore() (LintStore, error) {
	if h.cfg.Lints == nil {
		return nil, &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: "this server keeps no lints"}
	}
	return h.cfg.Lints, nil
}

// lintName reads and checks the {name} path segment.
func lintName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := lint.ValidateName(name); err != nil {
		return "", badRequest("%v", err)
	}
	return name, nil
}

// compileLint compiles a lint, its errors as the API's replies.
func compileLint(name string, spec controlapi.Lint) (*lint.Lint, error) {
	l, err := lint.Compile(name, spec)
	var ee *lint.ExamplesError
	switch {
	case err == nil:
		return l, nil
	case errors.As(err, &ee):
		return nil, &httpError{status: http.StatusUnprocessableEntity, code: controlapi.CodeLintExamplesFailed, msg: err.Error(), details: ee.Failures}
	case errors.Is(err, lint.ErrTooCostly):
		return nil, &httpError{status: http.StatusUnprocessableEntity, code: controlapi.CodeLintTooCostly, msg: err.Error()}
	}
	return nil, badRequest("%v", err)
}

func (h *Handler) putLint(w http.ResponseWriter, r *http.Request) error {
	ls, err := h.lintStore()
	if err != nil {
		return err
	}
	name, err := lintName(r)
	if err != nil {
		return err
	}
	var spec controlapi.Lint
	if err := ReadJSON(w, r, maxControlBytes, &spec, false); err != nil {
		return err
	}
	if _, err := compileLint(name, spec); err != nil {
		return err
	}
	if err := ls.PutLint(r.Context(), name, spec); err != nil {
		return err
	}
	id, _ := access.FromContext(r.Context())
	h.log.Info("control: lint set", "lint", name, "namespaces", spec.Namespaces, "severity", spec.Severity, "by", id.Name)
	writeJSON(w, http.StatusOK, controlapi.LintInfo{Name: name, Lint: spec})
	return nil
}

func (h *Handler) getLint(w http.ResponseWriter, r *http.Request) error {
	ls, err := h.lintStore()
	if err != nil {
		return err
	}
	name, err := lintName(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	spec, err := ls.GetLint(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, controlapi.LintInfo{Name: name, Lint: spec})
	return nil
}

func (h *Handler) listLints(w http.ResponseWriter, r *http.Request) error {
	ls, err := h.lintStore()
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	specs, err := ls.Lints(r.Context())
	if err != nil {
		return err
	}
	list := controlapi.LintList{Lints: make([]controlapi.LintInfo, 0, len(specs))}
	for name, spec := range specs {
		list.Lints = append(list.Lints, controlapi.LintInfo{Name: name, Lint: spec})
	}
	slices.SortFunc(list.Lints, func(a, b controlapi.LintInfo) int { return cmp.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (h *Handler) deleteLint(w http.ResponseWriter, r *http.Request) error {
	ls, err := h.lintStore()
	if err != nil {
		return err
	}
	name, err := lintName(r)
	if err != nil {
		return err
	}
	if err := ls.DeleteLint(r.Context(), name); err != nil {
		return err
	}
	id, _ := access.FromContext(r.Context())
	h.log.Info("control: lint deleted", "lint", name, "by", id.Name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// testLint runs a lint (the one saved, or the unsaved one of the body)
// over the namespace's history: each revision's change, from the
// namespace's values at the revision before to its values at it.
func (h *Handler) testLint(w http.ResponseWriter, r *http.Request) error {
	ls, err := h.lintStore()
	if err != nil {
		return err
	}
	name, err := lintName(r)
	if err != nil {
		return err
	}
	q, err := query(r, "ns", "limit")
	if err != nil {
		return err
	}
	ns := q["ns"]
	if err := transport.ValidateNamespace(ns); err != nil {
		return badRequest("ns: %v", err)
	}
	if id, ok := access.FromContext(r.Context()); ok && h.cfg.Authenticator != nil && !id.MayControl(ns) {
		return forbidden("token %q may not control namespace %q", id.Name, ns)
	}
	limit, ok, err := intParam(q, "limit", 1)
	switch {
	case err != nil:
		return err
	case !ok:
		limit = DefaultLintTestRevisions
	case limit > MaxLintTestRevisions:
		return badRequest("limit=%d: at most %d", limit, MaxLintTestRevisions)
	}
	data, err := readBody(w, r, maxControlBytes)
	if err != nil {
		return err
	}
	var spec controlapi.Lint
	if len(bytes.TrimSpace(data)) == 0 {
		if spec, err = ls.GetLint(r.Context(), name); err != nil {
			return err
		}
	} else if err := decodeJSON(data, &spec, false); err != nil {
		return err
	}
	l, err := compileLint(name, spec)
	if err != nil {
		return err
	}
	hist, err := h.cfg.Store.History(r.Context(), ns, int(limit), 0)
	if err != nil {
		return err
	}
	res, err := h.runLintTest(r.Context(), l, ns, hist)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// runLintTest runs l over each record's change of hist.
func (h *Handler) runLintTest(ctx context.Context, l *lint.Lint, ns string, hist *controlapi.History) (controlapi.LintTestResult, error) {
	res := controlapi.LintTestResult{Namespace: ns, WouldBlock: []int64{}, WouldWarn: []int64{}}
	cache := map[int64]map[string]json.RawMessage{}
	valuesAt := func(rev int64) (map[string]json.RawMessage, error) {
		if rev <= 0 {
			return nil, nil
		}
		if v, ok := cache[rev]; ok {
			return v, nil
		}
		nv, err := h.cfg.Store.ValuesAt(ctx, ns, rev)
		if err != nil {
			return nil, err
		}
		cache[rev] = nv.Values
		return nv.Values, nil
	}
	for _, rec := range hist.Revisions {
		newV, err := valuesAt(rec.Revision)
		if err == nil {
			var oldV map[string]json.RawMessage
			if oldV, err = valuesAt(rec.PrevRevision); err == nil {
				c := l.Eval(ctx, lint.Input{Namespace: ns, Old: oldV, New: newV, Puts: rec.Puts, Deletes: rec.Deletes})
				switch c.Result {
				case controlapi.CheckBlock:
					res.WouldBlock = append(res.WouldBlock, rec.Revision)
				case controlapi.CheckWarn:
					res.WouldWarn = append(res.WouldWarn, rec.Revision)
				}
				if c.Result != controlapi.CheckPass {
					res.Results = append(res.Results, controlapi.LintTestRevision{Revision: rec.Revision, Check: c})
				}
				res.Checked++
				continue
			}
		}
		var ce *transport.CompactedError
		if errors.As(err, &ce) {
			// The store's history ends here: what is older is gone.
			res.Truncated = true
			break
		}
		return res, err
	}
	return res, ctx.Err()
}

// MaxLints bounds the lints a store keeps: a store asked to keep more
// refuses with ErrFull.
const MaxLints = 1000
