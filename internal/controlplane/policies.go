package controlplane

import (
	"context"
	"errors"
	"net/http"
	"path"
	"slices"
	"sort"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/transport"
)

// changeStore returns the server's ChangeStore, or a 404 when it has none.
func (h *Handler) changeStore() (ChangeStore, error) {
	if h.cfg.Changes == nil {
		return nil, &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: "this server keeps no changes nor policies"}
	}
	return h.cfg.Changes, nil
}

func (h *Handler) putPolicy(w http.ResponseWriter, r *http.Request) error {
	cs, err := h.changeStore()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := access.ValidateName(name); err != nil {
		return badRequest("policy name: %v", err)
	}
	if h.cfg.Authenticator == nil || identity(r) == access.Anonymous {
		// Anyone could claim any name: approvals would mean nothing.
		return forbidden("this server requires no tokens: it keeps no policies (an approval needs an identity)")
	}
	var p controlapi.Policy
	if err := ReadJSON(w, r, maxControlBytes, &p, false); err != nil {
		return err
	}
	if err := checkPolicy(&p); err != nil {
		return err
	}
	if err := cs.PutPolicy(r.Context(), name, p); err != nil {
		return err
	}
	h.log.Info("control: policy set", "policy", name, "namespaces", p.Namespaces, "approvals", p.Approvals, "by", identity(r))
	writeJSON(w, http.StatusOK, p)
	return nil
}

// checkPolicy checks a policy's fields and fills in its defaults.
func checkPolicy(p *controlapi.Policy) error {
	if _, err := path.Match(p.Namespaces, ""); err != nil || p.Namespaces == "" {
		return badRequest("namespaces: want a pattern such as \"payments.*\", got %q", p.Namespaces)
	}
	switch {
	case p.Approvals < 0 || p.Approvals > 10:
		return badRequest("approvals: want 0 to 10, got %d", p.Approvals)
	case p.Approvals > 0 && len(p.Approvers) == 0:
		return badRequest("approvers: a policy that needs approvals must name its approvers")
	case p.Approvals == 0 && len(p.Emergency) == 0 && p.MinSDKVersion == "":
		return badRequest("a policy needs approvals, an emergency list or a min_sdk_version")
	}
	for _, list := range [][]string{p.Approvers, p.Emergency} {
		for _, a := range list {
			if _, err := path.Match(a, ""); err != nil || a == "" {
				return badRequest("approver %q: not an identity nor a glob", a)
			}
		}
	}
	if p.RetroReview == "" {
		p.RetroReview = controlapi.DefaultRetroReview.String()
	}
	d, err := dataplane.ParseDuration(p.RetroReview)
	if err != nil || d <= 0 {
		return badRequest("retro_review: want a positive duration such as \"24h\", got %q", p.RetroReview)
	}
	if p.MinSDKVersion != "" {
		if _, ok := parseVersion(p.MinSDKVersion); !ok {
			return badRequest("min_sdk_version: want a version such as \"0.5.0\", got %q", p.MinSDKVersion)
		}
	}
	return nil
}

// namespacePolicies lists the policies that apply to a namespace: what
// its changes need, for whoever controls it.
func (h *Handler) namespacePolicies(w http.ResponseWriter, r *http.Request) error {
	ns, err := pathNamespace(r)
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	ps, err := h.policies(r.Context(), ns)
	if err != nil {
		return err
	}
	out := controlapi.NamespacePolicies{Namespace: ns, Policies: make([]controlapi.PolicyInfo, 0, len(ps))}
	for _, p := range ps {
		out.Policies = append(out.Policies, controlapi.PolicyInfo{Name: p.name, Policy: p.Policy})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) getPolicy(w http.ResponseWriter, r *http.Request) error {
	cs, err := h.changeStore()
	if err != nil {
		return err
	}
	if _, err := query(r); err != nil {
		return err
	}
	p, err := cs.GetPolicy(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (h *Handler) deletePolicy(w http.ResponseWriter, r *http.Request) error {
	cs, err := h.changeStore()
	if err != nil {
		return err
	}
	if err := cs.DeletePolicy(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	h.log.Info("control: policy deleted", "policy", r.PathValue("name"), "by", identity(r))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// namedPolicy is a policy with its name.
type namedPolicy struct {
	name string
	controlapi.Policy
}

// policies returns the policies that match any of namespaces, by name.
func (h *Handler) policies(ctx context.Context, namespaces ...string) ([]namedPolicy, error) {
	if h.cfg.Changes == nil {
		return nil, nil
	}
	all, err := h.cfg.Changes.Policies(ctx)
	if err != nil {
		return nil, err
	}
	return matching(all, namespaces), nil
}

// matching returns the policies of all that match any of namespaces, by
// name.
func matching(all map[string]controlapi.Policy, namespaces []string) []namedPolicy {
	var out []namedPolicy
	for name, p := range all {
		for _, ns := range namespaces {
			if ok, _ := path.Match(p.Namespaces, ns); ok {
				out = append(out, namedPolicy{name, p})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// guarded refuses a write of ns that bypasses review (a direct publish,
// a rollback, a rollout's start, a schema's change) when a policy that
// needs approvals matches ns.
func (h *Handler) guarded(ctx context.Context, ns, what string) error {
	ps, err := h.policies(ctx, ns)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Approvals > 0 {
			return &httpError{status: http.StatusForbidden, code: controlapi.CodeApprovalRequired,
				msg: what + " of namespace " + ns + " needs an approved change (policy " + p.name + "): propose one with holdfast change propose"}
		}
	}
	return nil
}

// matches reports whether identity name matches any of patterns
// (identities and globs).
func matches(patterns []string, name string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		ok, _ := path.Match(p, name)
		return ok
	})
}

// retroWindow is the shortest retro review window of ps.
func retroWindow(ps []namedPolicy) time.Duration {
	w := controlapi.DefaultRetroReview
	for i, p := range ps {
		d, err := dataplane.ParseDuration(p.RetroReview)
		if err != nil || d <= 0 {
			d = controlapi.DefaultRetroReview
		}
		if i == 0 || d < w {
			w = d
		}
	}
	return w
}

// identity is the caller's name: its token's, or anonymous on an open
// server.
func identity(r *http.Request) string {
	if id, ok := access.FromContext(r.Context()); ok && id.Name != "" {
		return id.Name
	}
	return access.Anonymous
}

// mayControl refuses a caller without control of ns (a server without
// tokens lets anyone).
func (h *Handler) mayControl(r *http.Request, namespaces ...string) error {
	if h.cfg.Authenticator == nil {
		return nil
	}
	id, _ := access.FromContext(r.Context())
	for _, ns := range namespaces {
		if !id.MayControl(ns) {
			return forbidden("token %q may not control namespace %q", id.Name, ns)
		}
	}
	return nil
}

// isNotFound reports whether err says a namespace has no revision.
func isNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, transport.ErrNotFound) || errors.Is(err, dataplane.ErrUnknownNamespace)
}
