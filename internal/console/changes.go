package console

import (
	"bytes"
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// Changes: the list (and the inbox: awaiting=me), a change's page, and
// its actions, each the API's.

// changesView is a list of changes as the changes page shows it.
type changesView struct {
	Changes   []controlapi.Change
	Inbox     bool
	NS, State string
}

// changeList reads the changes the query asks for (ns, state,
// awaiting=me: the inbox), overdue emergency reviews first.
func (c *Console) changeList(r *http.Request, rq *request) (changesView, error) {
	q := url.Values{}
	for _, k := range []string{"ns", "state"} {
		if v := r.URL.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	inbox := r.URL.Query().Get("awaiting") == "me"
	if inbox {
		q.Set("awaiting", "me")
	}
	var list controlapi.ChangeList
	if err := rq.api.do(http.MethodGet, "/control/changes", q, nil, &list); err != nil {
		return changesView{}, err
	}
	// Overdue emergency reviews first, then the newest.
	slices.SortStableFunc(list.Changes, func(a, b controlapi.Change) int { return cmp.Compare(overdue(b), overdue(a)) })
	return changesView{Changes: list.Changes, Inbox: inbox, NS: q.Get("ns"), State: q.Get("state")}, nil
}

func (c *Console) changesPage(w http.ResponseWriter, r *http.Request, rq *request) {
	v, err := c.changeList(r, rq)
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	title := "Changes"
	if v.Inbox {
		title = "Inbox"
	}
	events := "/console/changes/events"
	if r.URL.RawQuery != "" {
		events += "?" + r.URL.RawQuery
	}
	c.render(w, r, rq, http.StatusOK, "changes", page{Title: title, Nav: "changes", Data: map[string]any{
		"View": v, "Inbox": v.Inbox, "NS": v.NS, "State": v.State, "Events": events}})
}

// changesEvents pushes the list (the inbox with awaiting=me) as it
// changes: a change proposed, approved or published shows without a
// reload.
func (c *Console) changesEvents(w http.ResponseWriter, r *http.Request, rq *request) {
	c.push(w, r, rq, "changes", func(buf *bytes.Buffer) error {
		v, err := c.changeList(r, rq)
		if err != nil {
			return err
		}
		return c.pages["changes"].ExecuteTemplate(buf, "list", v)
	})
}

func overdue(ch controlapi.Change) int {
	if ch.RetroReview != nil && ch.RetroReview.Overdue {
		return 1
	}
	return 0
}

// changeDiffLine is one key of a change's semantic diff.
type changeDiffLine struct {
	controlapi.DiffEntry
	OldText, NewText string
}

func (c *Console) changePage(w http.ResponseWriter, r *http.Request, rq *request) {
	id := r.PathValue("id")
	var ch controlapi.Change
	if err := rq.api.do(http.MethodGet, "/control/changes/"+url.PathEscape(id), nil, nil, &ch); err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	diff := make([]changeDiffLine, 0, len(ch.Diff))
	for _, d := range ch.Diff {
		diff = append(diff, changeDiffLine{DiffEntry: d, OldText: compact(d.Old), NewText: compact(d.New)})
	}
	actions := map[string]bool{}
	for _, a := range ch.Actions {
		actions[a] = true
	}
	c.render(w, r, rq, http.StatusOK, "change", page{Title: "Change " + ch.ID, Nav: "changes", Data: map[string]any{
		"Change": ch, "Diff": diff, "Actions": actions}})
}

// changeActions are the actions a change's page posts, by the path's
// {action}.
var changeActions = []string{controlapi.ActionApprove, controlapi.ActionReject, controlapi.ActionWithdraw,
	controlapi.ActionRebase, controlapi.ActionPublish}

func (c *Console) changeAction(w http.ResponseWriter, r *http.Request, rq *request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	if !slices.Contains(changeActions, action) {
		c.fail(w, r, rq, http.StatusNotFound, "no such action: "+action)
		return
	}
	path := "/control/changes/" + url.PathEscape(id) + "/" + action
	var err error
	if action == controlapi.ActionPublish {
		body := controlapi.ChangePublishRequest{Reason: r.PostFormValue("reason"), Bake: r.PostFormValue("bake")}
		if stages := strings.TrimSpace(r.PostFormValue("stages")); stages != "" {
			for f := range strings.FieldsFuncSeq(stages, func(r rune) bool { return r == ',' || r == ' ' }) {
				p, perr := strconv.ParseFloat(strings.TrimSuffix(f, "%"), 64)
				if perr != nil {
					c.fail(w, r, rq, http.StatusBadRequest, "stages: want percentages such as 10,50,100")
					return
				}
				body.Stages = append(body.Stages, p)
			}
		}
		var reply controlapi.ChangePublishReply
		if err = rq.api.do(http.MethodPost, path, nil, body, &reply); err == nil && reply.Rollout != "" {
			for ns := range reply.Revisions {
				http.Redirect(w, r, "/console/namespaces/"+url.PathEscape(ns)+"/rollouts/"+url.PathEscape(reply.Rollout), http.StatusSeeOther)
				return
			}
		}
	} else {
		err = rq.api.do(http.MethodPost, path, nil, controlapi.ChangeActionRequest{Reason: r.PostFormValue("reason")}, nil)
	}
	if err != nil {
		c.failAPI(w, r, rq, err)
		return
	}
	http.Redirect(w, r, "/console/changes/"+url.PathEscape(id), http.StatusSeeOther)
}
