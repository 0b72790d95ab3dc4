package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
	"github.com/holdfast-dev/holdfast/transport"
)

// The change workflow: proposals, their review, approvals and publishing.

// maxChangeNamespaces bounds the namespaces of one change (each is part
// of one store transaction).
const maxChangeNamespaces = 16

func changeError(status int, code, format string, args ...any) error {
	return &httpError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func newChangeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *Handler) proposeChange(w http.ResponseWriter, r *http.Request) error {
	cs, err := h.changeStore()
	if err != nil {
		return err
	}
	var body controlapi.ChangeRequest
	if err := ReadJSON(w, r, h.cfg.MaxPublishBytes, &body, false); err != nil {
		return err
	}
	if err := checkAudit("", body.Reason); err != nil {
		return err
	}
	if err := CheckText("link", body.Link, MaxReasonBytes); err != nil {
		return err
	}
	if err := CheckText("allow_old_sdk_reason", body.AllowOldSDKReason, MaxReasonBytes); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(body.Reason) == "":
		return badRequest("a change needs a reason")
	case len(body.Namespaces) == 0:
		return badRequest("a change needs at least one namespace")
	case len(body.Namespaces) > maxChangeNamespaces:
		return badRequest("a change has at most %d namespaces", maxChangeNamespaces)
	case body.AllowOldSDK && strings.TrimSpace(body.AllowOldSDKReason) == "":
		return badRequest("allow_old_sdk needs allow_old_sdk_reason")
	}
	names := sortedNamespaces(body.Namespaces)
	if err := h.mayControl(r, names...); err != nil {
		return err
	}
	olds := make(map[string]map[string]json.RawMessage, len(names))
	for _, ns := range names {
		nc := body.Namespaces[ns]
		if err := transport.ValidateNamespace(ns); err != nil {
			return badRequest("%v", err)
		}
		if len(nc.Puts)+len(nc.Deletes) == 0 && nc.Schema == nil && !nc.DeleteSchema {
			return badRequest("namespace %q: a change of no keys and no schema", ns)
		}
		if nc.Schema != nil {
			if nc.DeleteSchema {
				return badRequest("namespace %q: a change sets a schema or deletes it, not both", ns)
			}
			nc.Schema = compact(nc.Schema)
		}
		if err := checkChange(nc.Puts, nc.Deletes); err != nil {
			return err
		}
		for k, v := range nc.Puts {
			if !json.Valid(v) {
				return badRequest("namespace %q: key %q: value is not one JSON value", ns, k)
			}
			nc.Puts[k] = compact(v)
		}
		if nc.BaseRevision < 0 {
			return badRequest("namespace %q: base_revision %d is negative", ns, nc.BaseRevision)
		}
		old, rev, err := cs.Current(r.Context(), ns)
		olds[ns] = old
		if isNotFound(err) {
			return &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: fmt.Sprintf("namespace %q has no revision: publish its first content before proposing changes", ns)}
		}
		if err != nil {
			return err
		}
		if nc.BaseRevision == 0 {
			nc.BaseRevision = rev
		}
		if nc.BaseRevision != rev {
			return changeError(http.StatusConflict, controlapi.CodeStaleBase, "namespace %q is at revision %d, not %d: propose against its revision now", ns, rev, nc.BaseRevision)
		}
		body.Namespaces[ns] = nc
	}
	ps, err := h.policies(r.Context(), names...)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	me := identity(r)
	c := controlapi.Change{
		ID: newChangeID(), State: controlapi.ChangeOpen, Author: me, Reason: body.Reason, Link: body.Link,
		Namespaces: body.Namespaces, Approvals: []controlapi.Approval{},
		AllowOldSDK: body.AllowOldSDK, AllowOldSDKReason: body.AllowOldSDKReason,
		CreatedAt: now, UpdatedAt: now,
	}
	if err := h.review(r.Context(), &c, ps, olds); err != nil {
		return err
	}
	ev := controlapi.ChangeEvent{At: now, By: me, Action: "propose", Reason: body.Reason, Detail: "hash " + c.Hash}
	if body.AllowOldSDK {
		ev.Detail += "; allow_old_sdk: " + body.AllowOldSDKReason
	}
	c.Events = []controlapi.ChangeEvent{ev}
	if satisfied(ps, &c) && len(blocked(c.Checks)) == 0 {
		c.State = controlapi.ChangeApproved
	}
	if err := cs.CreateChange(r.Context(), c); err != nil {
		return err
	}
	h.log.Info("control: change proposed", "change", c.ID, "namespaces", names, "author", me, "state", c.State)
	out, err := h.view(r, c, ps, true)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// satisfied reports whether c's valid approvals satisfy every policy of ps.
func satisfied(ps []namedPolicy, c *controlapi.Change) bool {
	for _, p := range ps {
		n := 0
		for _, a := range c.Approvals {
			if a.Hash == c.Hash && matches(p.Approvers, a.By) {
				n++
			}
		}
		if n < p.Approvals {
			return false
		}
	}
	return true
}

func required(ps []namedPolicy) int {
	n := 0
	for _, p := range ps {
		n = max(n, p.Approvals)
	}
	return n
}

// stale returns the namespaces of c whose revision moved past its base.
func (h *Handler) stale(ctx context.Context, c *controlapi.Change) ([]string, error) {
	var out []string
	for _, ns := range sortedNamespaces(c.Namespaces) {
		_, rev, err := h.cfg.Changes.Current(ctx, ns)
		if err != nil && !isNotFound(err) {
			return nil, err
		}
		if rev != c.Namespaces[ns].BaseRevision {
			out = append(out, ns)
		}
	}
	return out, nil
}

// view is c as the caller sees it: its state derived (stale, unless
// fresh: its bases were read just now; a retro review overdue), its
// required approvals and the caller's actions.
func (h *Handler) view(r *http.Request, c controlapi.Change, ps []namedPolicy, fresh bool) (controlapi.Change, error) {
	c.Required = required(ps)
	open := c.State == controlapi.ChangeOpen || c.State == controlapi.ChangeApproved
	if open && !fresh {
		st, err := h.stale(r.Context(), &c)
		if err != nil {
			return c, err
		}
		if len(st) > 0 {
			c.State = controlapi.ChangeStale
		}
	}
	if rr := c.RetroReview; rr != nil {
		cp := *rr
		cp.Overdue = cp.ApprovedBy == "" && time.Now().After(cp.Due)
		c.RetroReview = &cp
	}
	me := identity(r)
	var acts []string
	if h.mayControl(r, sortedNamespaces(c.Namespaces)...) == nil {
		switch c.State {
		case controlapi.ChangeOpen, controlapi.ChangeApproved:
			if h.approvable(&c, ps, me) == nil {
				acts = append(acts, controlapi.ActionApprove)
			}
			if c.State == controlapi.ChangeApproved {
				acts = append(acts, controlapi.ActionPublish)
			}
			if me != c.Author {
				acts = append(acts, controlapi.ActionReject)
			}
			acts = append(acts, controlapi.ActionRebase)
		case controlapi.ChangeStale:
			acts = append(acts, controlapi.ActionRebase)
		case controlapi.ChangePublishing:
			acts = append(acts, controlapi.ActionPublish)
		case controlapi.ChangePublished:
			if c.RetroReview != nil && c.RetroReview.ApprovedBy == "" && me != c.Author && approverOf(ps, me) {
				acts = append(acts, controlapi.ActionApprove)
			}
		}
		if open && me == c.Author {
			acts = append(acts, controlapi.ActionWithdraw)
		}
	}
	if acts == nil {
		acts = []string{}
	}
	c.Actions = acts
	if c.Approvals == nil {
		c.Approvals = []controlapi.Approval{}
	}
	return c, nil
}

// approverOf reports whether me is an approver of any of ps (any one
// when there is no policy).
func approverOf(ps []namedPolicy, me string) bool {
	if len(ps) == 0 {
		return true
	}
	for _, p := range ps {
		if matches(p.Approvers, me) {
			return true
		}
	}
	return false
}

// approvable says why me may not approve c now (its state as view
// derives it; the SDK gate aside), nil when it may.
func (h *Handler) approvable(c *controlapi.Change, ps []namedPolicy, me string) error {
	switch c.State {
	case controlapi.ChangeStale:
		return changeError(http.StatusConflict, controlapi.CodeStaleBase, "change %s: a base revision moved: rebase it first", c.ID)
	case controlapi.ChangeOpen, controlapi.ChangeApproved:
	default:
		return changeError(http.StatusConflict, controlapi.CodeNotApprovable, "change %s is %s", c.ID, c.State)
	}
	if b := blocked(c.Checks, controlapi.CheckSchema, controlapi.CheckLint); len(b) > 0 {
		e := changeError(http.StatusConflict, controlapi.CodeNotApprovable, "change %s: %d check(s) block it", c.ID, len(b)).(*httpError)
		e.details = checkMessages(b)
		return e
	}
	if me == c.Author {
		return changeError(http.StatusForbidden, controlapi.CodeSelfApproval, "change %s: its author may not approve it", c.ID)
	}
	for _, a := range c.Approvals {
		if a.By == me && a.Hash == c.Hash {
			return changeError(http.StatusConflict, controlapi.CodeAlreadyApproved, "change %s: %s approved it already", c.ID, me)
		}
	}
	if !approverOf(ps, me) {
		return changeError(http.StatusForbidden, controlapi.CodeNotApprover, "change %s: %s is not an approver of its namespaces' policies", c.ID, me)
	}
	return nil
}

// sdkGate checks c's reach now against the policies' min_sdk_version.
func (h *Handler) sdkGate(ctx context.Context, c *controlapi.Change, ps []namedPolicy) error {
	gated := false
	for _, p := range ps {
		gated = gated || p.MinSDKVersion != ""
	}
	if !gated {
		return nil
	}
	reach, err := h.reach(ctx, c, ps)
	if err != nil {
		return err
	}
	c.Reach = reach
	if b := blocked(minSDKChecks(c, reach)); len(b) > 0 {
		e := changeError(http.StatusUnprocessableEntity, controlapi.CodeBelowMinSDK, "change %s reaches %d client(s) below the min_sdk_version: pass allow_old_sdk with a reason to reach them", c.ID, belowMin(reach)).(*httpError)
		e.details = checkMessages(b)
		return e
	}
	return nil
}

func belowMin(reach map[string]controlapi.Reach) int {
	n := 0
	for _, rc := range reach {
		n += rc.BelowMin
	}
	return n
}

// changeRequest reads a request on change {id}: its optional body into
// body (reason its reason, checked), the change with its version and
// policies; the caller must control each of its namespaces.
func (h *Handler) changeRequest(w http.ResponseWriter, r *http.Request, body any, reason *string) (controlapi.Change, int64, []namedPolicy, error) {
	if err := ReadJSON(w, r, maxControlBytes, body, true); err != nil {
		return controlapi.Change{}, 0, nil, err
	}
	if err := checkAudit("", *reason); err != nil {
		return controlapi.Change{}, 0, nil, err
	}
	c, version, ps, err := h.loadChange(r)
	if err != nil {
		return c, 0, nil, err
	}
	return c, version, ps, h.mayControl(r, sortedNamespaces(c.Namespaces)...)
}

// loadChange reads change id with its policies and its view.
func (h *Handler) loadChange(r *http.Request) (controlapi.Change, int64, []namedPolicy, error) {
	cs, err := h.changeStore()
	if err != nil {
		return controlapi.Change{}, 0, nil, err
	}
	// The two reads at once: a publish's latency is theirs plus its
	// commit's.
	var pols map[string]controlapi.Policy
	var perr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pols, perr = cs.Policies(r.Context())
	}()
	c, version, err := cs.GetChange(r.Context(), r.PathValue("id"))
	wg.Wait()
	if err = errors.Join(err, perr); err != nil {
		return c, 0, nil, err
	}
	return c, version, matching(pols, sortedNamespaces(c.Namespaces)), nil
}

func (h *Handler) getChange(w http.ResponseWriter, r *http.Request) error {
	if _, err := query(r); err != nil {
		return err
	}
	c, _, ps, err := h.loadChange(r)
	if err != nil {
		return err
	}
	if err := h.mayControl(r, sortedNamespaces(c.Namespaces)...); err != nil {
		return err
	}
	out, err := h.view(r, c, ps, false)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) listChanges(w http.ResponseWriter, r *http.Request) error {
	cs, err := h.changeStore()
	if err != nil {
		return err
	}
	q, err := query(r, "ns", "state", "awaiting")
	if err != nil {
		return err
	}
	if a, ok := q["awaiting"]; ok && a != "me" {
		return badRequest("awaiting=%q: only awaiting=me is known", a)
	}
	all, err := cs.Changes(r.Context())
	if err != nil {
		return err
	}
	pols, err := cs.Policies(r.Context())
	if err != nil {
		return err
	}
	out := []controlapi.Change{}
	for _, c := range all {
		names := sortedNamespaces(c.Namespaces)
		if ns, ok := q["ns"]; ok && !slices.Contains(names, ns) {
			continue
		}
		if h.mayControl(r, names...) != nil {
			continue
		}
		v, err := h.view(r, c, matching(pols, names), false)
		if err != nil {
			return err
		}
		if st, ok := q["state"]; ok && v.State != st && !(st == "overdue" && v.RetroReview != nil && v.RetroReview.Overdue) {
			continue
		}
		if _, ok := q["awaiting"]; ok && !slices.Contains(v.Actions, controlapi.ActionApprove) {
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b controlapi.Change) int { return b.CreatedAt.Compare(a.CreatedAt) })
	writeJSON(w, http.StatusOK, controlapi.ChangeList{Changes: out})
	return nil
}

// changeAction is POST /control/changes/{id}/approve, reject, withdraw
// and rebase.
func (h *Handler) changeAction(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.ChangeActionRequest
	c, version, ps, err := h.changeRequest(w, r, &body, &body.Reason)
	if err != nil {
		return err
	}
	action := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	v, err := h.view(r, c, ps, false)
	if err != nil {
		return err
	}
	me := identity(r)
	now := time.Now().UTC()
	ev := controlapi.ChangeEvent{At: now, By: me, Action: action, Reason: body.Reason}
	open := v.State == controlapi.ChangeOpen || v.State == controlapi.ChangeApproved || v.State == controlapi.ChangeStale
	switch action {
	case controlapi.ActionApprove:
		if c.Emergency {
			return h.retroApprove(w, r, c, version, ps, ev)
		}
		if err := h.approvable(&v, ps, me); err != nil {
			return err
		}
		if err := h.sdkGate(r.Context(), &c, ps); err != nil {
			return err
		}
		c.Approvals = append(c.Approvals, controlapi.Approval{By: me, At: now, Hash: c.Hash})
		ev.Detail = "hash " + c.Hash
		if satisfied(ps, &c) {
			c.State = controlapi.ChangeApproved
		}
	case controlapi.ActionReject:
		if !open {
			return changeError(http.StatusConflict, transport.CodeConflict, "change %s is %s", c.ID, v.State)
		}
		if me == c.Author {
			return changeError(http.StatusForbidden, transport.CodeForbidden, "change %s: its author withdraws it, not rejects it", c.ID)
		}
		c.State = controlapi.ChangeRejected
	case controlapi.ActionWithdraw:
		if !open {
			return changeError(http.StatusConflict, transport.CodeConflict, "change %s is %s", c.ID, v.State)
		}
		if me != c.Author {
			return forbidden("change %s: only its author (%s) may withdraw it", c.ID, c.Author)
		}
		c.State = controlapi.ChangeWithdrawn
	case controlapi.ActionRebase:
		if !open {
			return changeError(http.StatusConflict, transport.CodeConflict, "change %s is %s", c.ID, v.State)
		}
		voided := len(c.Approvals)
		olds := make(map[string]map[string]json.RawMessage, len(c.Namespaces))
		for ns, nc := range c.Namespaces {
			old, rev, err := h.cfg.Changes.Current(r.Context(), ns)
			if err != nil {
				return err
			}
			nc.BaseRevision, olds[ns] = rev, old
			c.Namespaces[ns] = nc
		}
		if err := h.review(r.Context(), &c, ps, olds); err != nil {
			return err
		}
		c.Approvals = []controlapi.Approval{}
		c.State = controlapi.ChangeOpen
		if satisfied(ps, &c) && len(blocked(c.Checks)) == 0 {
			c.State = controlapi.ChangeApproved
		}
		ev.Detail = fmt.Sprintf("hash %s; %d approval(s) voided", c.Hash, voided)
	default:
		return &httpError{status: http.StatusNotFound, code: transport.CodeNotFound, msg: "no such action: " + action}
	}
	c.UpdatedAt = now
	c.Events = append(c.Events, ev)
	if err := h.cfg.Changes.UpdateChange(r.Context(), c, version); err != nil {
		return err
	}
	h.log.Info("control: change "+action, "change", c.ID, "by", me, "state", c.State)
	out, err := h.view(r, c, ps, false)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// retroApprove closes an emergency publish's retro review.
func (h *Handler) retroApprove(w http.ResponseWriter, r *http.Request, c controlapi.Change, version int64, ps []namedPolicy, ev controlapi.ChangeEvent) error {
	switch {
	case c.RetroReview == nil:
		return changeError(http.StatusConflict, controlapi.CodeNotApprovable, "change %s has no retro review", c.ID)
	case c.RetroReview.ApprovedBy != "":
		return changeError(http.StatusConflict, controlapi.CodeAlreadyApproved, "change %s: %s reviewed it already", c.ID, c.RetroReview.ApprovedBy)
	case ev.By == c.Author:
		return changeError(http.StatusForbidden, controlapi.CodeSelfApproval, "change %s: a second person reviews an emergency publish, not its author", c.ID)
	case !approverOf(ps, ev.By):
		return changeError(http.StatusForbidden, controlapi.CodeNotApprover, "change %s: %s is not an approver of its namespaces' policies", c.ID, ev.By)
	}
	rr := *c.RetroReview
	rr.ApprovedBy, rr.ApprovedAt = ev.By, ev.At
	ev.Action, ev.Detail = "retro-review", fmt.Sprintf("due %s; late: %t", rr.Due.Format(time.RFC3339), ev.At.After(rr.Due))
	c.RetroReview = &rr
	c.Approvals = append(c.Approvals, controlapi.Approval{By: ev.By, At: ev.At, Hash: c.Hash})
	c.UpdatedAt = ev.At
	c.Events = append(c.Events, ev)
	if err := h.cfg.Changes.UpdateChange(r.Context(), c, version); err != nil {
		return err
	}
	h.log.Info("control: emergency change reviewed", "change", c.ID, "by", ev.By)
	out, err := h.view(r, c, ps, false)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) publishChange(w http.ResponseWriter, r *http.Request) error {
	var body controlapi.ChangePublishRequest
	c, version, ps, err := h.changeRequest(w, r, &body, &body.Reason)
	if err != nil {
		return err
	}
	if c.State == controlapi.ChangePublished {
		// Published already (a retry): its revisions, committed once.
		writeJSON(w, http.StatusOK, controlapi.ChangePublishReply{Revision: c.Revision, Revisions: c.Revisions, Rollout: c.Rollout})
		return nil
	}
	if c.State == controlapi.ChangePublishing {
		// A staged publish that did not settle (a crash, a failed write):
		// settle it now.
		return h.publishChangeStaged(w, r, c, version, body, identity(r))
	}
	// A base that moved is found by the commit, which is conditional on
	// each base revision (stale_base below).
	switch c.State {
	case controlapi.ChangeApproved:
	case controlapi.ChangeOpen:
		if b := blocked(c.Checks, controlapi.CheckSchema, controlapi.CheckLint); len(b) > 0 {
			code := controlapi.CodeLintBlocked
			if len(blocked(b, controlapi.CheckLint)) == 0 {
				code = transport.CodeSchemaViolation
			}
			e := changeError(http.StatusUnprocessableEntity, code, "change %s: %d check(s) block it", c.ID, len(b)).(*httpError)
			e.details = checkMessages(b)
			return e
		}
		return changeError(http.StatusForbidden, controlapi.CodeApprovalRequired, "change %s has %d of the %d approval(s) it needs", c.ID, len(c.Approvals), required(ps))
	default:
		return changeError(http.StatusConflict, transport.CodeConflict, "change %s is %s", c.ID, c.State)
	}
	if !satisfied(ps, &c) { // the policies may have changed since
		return changeError(http.StatusForbidden, controlapi.CodeApprovalRequired, "change %s: its approvals no longer satisfy the policies", c.ID)
	}
	if err := h.sdkGate(r.Context(), &c, ps); err != nil {
		return err
	}
	me := identity(r)
	now := time.Now().UTC()
	reason := c.Reason
	if body.Reason != "" {
		reason = body.Reason
	}
	if len(body.Stages) > 0 {
		return h.publishChangeStaged(w, r, c, version, body, me)
	}
	c.State, c.UpdatedAt = controlapi.ChangePublished, now
	writes := make(map[string]Write, len(c.Namespaces))
	for ns, nc := range c.Namespaces {
		base := nc.BaseRevision
		wr := Write{Puts: nc.Puts, Deletes: nc.Deletes, Actor: me, Reason: reason, IfRevision: &base, Kind: KindChange, Change: c.ID,
			DropSchema: nc.DeleteSchema}
		if nc.Schema != nil {
			sch, err := compileSchema(ns, nc.Schema)
			if err != nil {
				return err
			}
			wr.Schema, wr.CompiledSchema = nc.Schema, sch
		}
		writes[ns] = wr
	}
	c.Events = append(c.Events, controlapi.ChangeEvent{At: now, By: me, Action: "publish", Reason: body.Reason})
	rev, revs, err := h.cfg.Changes.CommitChange(r.Context(), c, version, writes)
	var cfe *ConflictError
	switch {
	case errors.As(err, &cfe):
		return changeError(http.StatusConflict, controlapi.CodeStaleBase, "change %s: the base revision of %s moved (%v): rebase it (which voids its approvals)", c.ID, cfe.Namespace, cfe)
	case errors.Is(err, ErrChangeMoved):
		// Another request wrote it: published meanwhile, answer as it did.
		if cur, _, gerr := h.cfg.Changes.GetChange(r.Context(), c.ID); gerr == nil && cur.State == controlapi.ChangePublished {
			writeJSON(w, http.StatusOK, controlapi.ChangePublishReply{Revision: cur.Revision, Revisions: cur.Revisions})
			return nil
		}
		return err
	case err != nil:
		return err
	}
	h.log.Info("control: change published", "change", c.ID, "revision", rev, "by", me)
	writeJSON(w, http.StatusOK, controlapi.ChangePublishReply{Revision: rev, Revisions: revs})
	return nil
}

// publishChangeStaged publishes an approved change of one namespace as a
// staged rollout. The change's record and the rollout's state are
// different stores' records (the rollout controller's commit is its own),
// so they are not one transaction: the change records "publishing"
// first (which claims it: one request wins the write), then the rollout
// starts, then the change settles as published with the rollout's id and
// revision. The start is idempotent by change id: a rollout whose start
// names the change (its reason, "change ID: …") is the change's, so a
// publish of a change left publishing (a crash after the start, a failed
// settling write) finds it and settles, and one left before the start
// starts it. A start that fails marks the change approved again.
func (h *Handler) publishChangeStaged(w http.ResponseWriter, r *http.Request, c controlapi.Change, version int64, body controlapi.ChangePublishRequest, me string) error {
	if len(c.Namespaces) != 1 {
		return badRequest("a change of %d namespaces cannot be published as a rollout: stages are for a change of one namespace", len(c.Namespaces))
	}
	ns := sortedNamespaces(c.Namespaces)[0]
	nc := c.Namespaces[ns]
	if nc.Schema != nil || nc.DeleteSchema {
		return badRequest("change %s changes the schema of %q, which a rollout cannot stage: publish it without stages", c.ID, ns)
	}
	reason := "change " + c.ID + ": " + c.Reason
	rec, found, err := h.changeRollout(r.Context(), ns, c.ID)
	if err != nil {
		return err
	}
	var spec controller.Spec
	if !found {
		if len(body.Stages) == 0 {
			return badRequest("change %s is publishing as a rollout that has not started: publish it again with its stages", c.ID)
		}
		req := controlapi.RolloutRequest{Puts: nc.Puts, Deletes: nc.Deletes, Stages: body.Stages, Bake: body.Bake,
			MaxNacks: body.MaxNacks, Prevalidate: body.Prevalidate, ReportTimeout: body.ReportTimeout, StageTimeout: body.StageTimeout,
			OnTimeout: body.OnTimeout, OnBreach: body.OnBreach, Gates: body.Gates, Reason: reason}
		for _, d := range []struct {
			name string
			v    *string
		}{{"bake", &req.Bake}, {"report_timeout", &req.ReportTimeout}, {"stage_timeout", &req.StageTimeout}} {
			v, err := durationParam(d.name, *d.v)
			if err != nil {
				return err
			}
			if *d.v != "" {
				*d.v = v.String()
			}
		}
		if spec, err = controller.SpecOf(&req); err != nil {
			return err
		}
		if _, err := controller.CheckSpec(ns, spec); err != nil {
			return err
		}
	}
	// Claim the change: publishing, at a version no other request holds.
	detail := "as a rollout: starting"
	if c.State == controlapi.ChangePublishing {
		detail = "as a rollout: resumed"
	}
	c.State, c.Staged, c.UpdatedAt = controlapi.ChangePublishing, true, time.Now().UTC()
	c.Events = append(c.Events, controlapi.ChangeEvent{At: c.UpdatedAt, By: me, Action: "publish", Reason: body.Reason, Detail: detail})
	if err := h.cfg.Changes.UpdateChange(r.Context(), c, version); err != nil {
		return err
	}
	if !found {
		rec, err = h.cfg.Store.Rollouts().Start(r.Context(), ns, spec, me, reason)
		if err != nil {
			if cur, v2, gerr := h.cfg.Changes.GetChange(r.Context(), c.ID); gerr == nil && cur.State == controlapi.ChangePublishing {
				cur.State = controlapi.ChangeApproved
				cur.Events = append(cur.Events, controlapi.ChangeEvent{At: time.Now().UTC(), By: me, Action: "publish-failed", Detail: err.Error()})
				_ = h.cfg.Changes.UpdateChange(r.Context(), cur, v2)
			}
			return err
		}
	}
	revs := map[string]int64{ns: rec.Revisions[0]}
	h.settleStaged(r.Context(), c.ID, me, rec.Revisions[0], revs, rec.ID)
	h.log.Info("control: change published as a rollout", "change", c.ID, "rollout", rec.ID, "by", me)
	writeJSON(w, http.StatusOK, controlapi.ChangePublishReply{Revision: rec.Revisions[0], Revisions: revs, Rollout: rec.ID})
	return nil
}

// changeRollout finds the rollout of ns whose start names change id.
func (h *Handler) changeRollout(ctx context.Context, ns, id string) (controller.Record, bool, error) {
	recs, err := h.cfg.Store.Rollouts().List(ctx, ns)
	if err != nil {
		return controller.Record{}, false, err
	}
	for _, rec := range recs {
		for _, d := range rec.Decisions {
			if d.What == "start" && strings.Contains(d.Reason, ": change "+id+": ") && len(rec.Revisions) > 0 {
				return rec, true, nil
			}
		}
	}
	return controller.Record{}, false, nil
}

// settleStaged marks change id, publishing, published by rollout at rev.
// A failure leaves it publishing (logged): publishing it again settles it.
func (h *Handler) settleStaged(ctx context.Context, id, me string, rev int64, revs map[string]int64, rollout string) {
	cur, version, err := h.cfg.Changes.GetChange(ctx, id)
	if err == nil && cur.State == controlapi.ChangePublishing {
		cur.State, cur.Revision, cur.Revisions, cur.Rollout = controlapi.ChangePublished, rev, revs, rollout
		cur.UpdatedAt = time.Now().UTC()
		cur.Events = append(cur.Events, controlapi.ChangeEvent{At: cur.UpdatedAt, By: me, Action: "published", Detail: fmt.Sprintf("rollout %s; revision %d", rollout, rev)})
		err = h.cfg.Changes.UpdateChange(ctx, cur, version)
	}
	if err != nil {
		h.log.Warn("control: settling a change published as a rollout (it stays publishing: publish it again)", "change", id, "err", err)
	}
}

// emergencyPublish is a publish with "emergency": by an identity in the
// emergency list of a policy of ns, with a reason: lints run and are
// recorded but do not stop it; it opens a retro review (a change in state
// published whose review a second person gives within the window).
func (h *Handler) emergencyPublish(w http.ResponseWriter, r *http.Request, ns string, wr Write, abort bool) error {
	if h.cfg.Changes == nil {
		return badRequest("this server keeps no policies: publish without emergency")
	}
	if strings.TrimSpace(wr.Reason) == "" {
		return badRequest("an emergency publish needs a reason")
	}
	ps, err := h.policies(r.Context(), ns)
	if err != nil {
		return err
	}
	me := identity(r)
	allowed := false
	for _, p := range ps {
		allowed = allowed || matches(p.Emergency, me)
	}
	if len(ps) == 0 {
		return badRequest("no policy governs namespace %q: publish without emergency", ns)
	}
	if !allowed {
		return forbidden("%s is not in the emergency list of namespace %q's policies", me, ns)
	}
	// The publish and its retro review commit in one transaction
	// (CommitChange creating the change's record): both exist or
	// neither. The commit is conditional on the revision the checks read;
	// without the caller's if_revision a write in between makes it read
	// and check again.
	var c controlapi.Change
	var rev int64
	var detail string
	wr.Kind = KindEmergency
	for attempt := 0; ; attempt++ {
		old, base, err := h.cfg.Changes.Current(r.Context(), ns)
		if err != nil && !isNotFound(err) {
			return err
		}
		checks, err := h.contentChecks(r.Context(), ns, old, wr.Puts, wr.Deletes, nil)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		c = controlapi.Change{
			ID: newChangeID(), State: controlapi.ChangePublished, Author: me, Reason: wr.Reason, Emergency: true,
			Namespaces: map[string]controlapi.NamespaceChange{ns: {BaseRevision: base, Puts: wr.Puts, Deletes: wr.Deletes}},
			Diff:       semanticDiff(ns, old, wr.Puts, wr.Deletes), Checks: checks, Approvals: []controlapi.Approval{},
			CreatedAt: now, UpdatedAt: now,
			RetroReview: &controlapi.RetroReview{Due: now.Add(retroWindow(ps))},
		}
		c.Hash = changeHash(&c)
		if c.Reach, err = h.reach(r.Context(), &c, ps); err != nil {
			return err
		}
		detail = "emergency"
		if nb := checkMessages(nonPassing(checks)); len(nb) > 0 {
			detail += "; checks passed over: " + strings.Join(nb, "; ")
		}
		c.Events = []controlapi.ChangeEvent{{At: now, By: me, Action: "emergency-publish", Reason: wr.Reason, Detail: detail}}
		cw := wr
		cw.Change = c.ID
		if cw.IfRevision == nil {
			cw.IfRevision = &base
		}
		var cfe *ConflictError
		rev, err = h.write(r.Context(), ns, cw, abort, func() (int64, error) {
			rev, _, err := h.cfg.Changes.CommitChange(r.Context(), c, 0, map[string]Write{ns: cw})
			return rev, err
		})
		if errors.As(err, &cfe) && wr.IfRevision == nil && attempt < maxAbortAttempts {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	h.log.Warn("control: emergency publish", "ns", ns, "revision", rev, "by", me, "change", c.ID, "checks", detail)
	writeJSON(w, http.StatusOK, controlapi.EmergencyReply{Revision: rev, RetroReview: c.ID})
	return nil
}

func nonPassing(cs []controlapi.Check) []controlapi.Check {
	var out []controlapi.Check
	for _, c := range cs {
		if c.Result != controlapi.CheckPass {
			out = append(out, c)
		}
	}
	return out
}

// lintDirect runs ns's lints over a direct publish: a block result
// refuses it (422 lint_blocked). The schema is the publish's own check.
func (h *Handler) lintDirect(ctx context.Context, ns string, wr Write) error {
	lints, err := h.lintsFor(ctx, ns)
	if err != nil || len(lints) == 0 || h.cfg.Changes == nil {
		return err
	}
	old, _, err := h.cfg.Changes.Current(ctx, ns)
	if err != nil && !isNotFound(err) {
		return err
	}
	checks, err := h.lintChecks(ctx, ns, old, wr.Puts, wr.Deletes)
	if err != nil {
		return err
	}
	if b := blocked(checks, controlapi.CheckLint); len(b) > 0 {
		e := changeError(http.StatusUnprocessableEntity, controlapi.CodeLintBlocked, "namespace %q: %d lint(s) block the publish", ns, len(b)).(*httpError)
		e.details = checkMessages(b)
		return e
	}
	return nil
}
