package controlapi

import (
	"context"
	"net/http"
	"net/url"
)

// ProposeChange proposes a change (POST /control/changes) and returns it
// with its review: the semantic diff, the checks, the reach. A check that
// blocks still records the change (it cannot be approved). A base
// revision behind its namespace is an *Error of code stale_base.
func (c *Client) ProposeChange(ctx context.Context, req ChangeRequest) (*Change, error) {
	var ch Change
	if err := c.do(ctx, http.MethodPost, "/control/changes", nil, req, &ch); err != nil {
		return nil, err
	}
	return &ch, nil
}

// GetChange returns change id with its review and the caller's actions
// (GET /control/changes/{id}).
func (c *Client) GetChange(ctx context.Context, id string) (*Change, error) {
	var ch Change
	if err := c.do(ctx, http.MethodGet, changePath(id, ""), nil, nil, &ch); err != nil {
		return nil, err
	}
	return &ch, nil
}

// ListChanges returns the changes opts select, newest first (GET
// /control/changes).
func (c *Client) ListChanges(ctx context.Context, opts ChangeListOptions) ([]Change, error) {
	q := url.Values{}
	if opts.Namespace != "" {
		q.Set("ns", opts.Namespace)
	}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	if opts.AwaitingMe {
		q.Set("awaiting", "me")
	}
	var l ChangeList
	if err := c.do(ctx, http.MethodGet, "/control/changes", q, nil, &l); err != nil {
		return nil, err
	}
	return l.Changes, nil
}

// ApproveChange approves change id as the caller (POST
// .../approve): refused with self_approval, not_approver,
// already_approved, not_approvable, stale_base or below_min_sdk.
func (c *Client) ApproveChange(ctx context.Context, id string, req ChangeActionRequest) (*Change, error) {
	return c.changeAction(ctx, id, ActionApprove, req)
}

// RejectChange rejects change id (POST .../reject).
func (c *Client) RejectChange(ctx context.Context, id string, req ChangeActionRequest) (*Change, error) {
	return c.changeAction(ctx, id, ActionReject, req)
}

// WithdrawChange withdraws change id, as its author (POST .../withdraw).
func (c *Client) WithdrawChange(ctx context.Context, id string, req ChangeActionRequest) (*Change, error) {
	return c.changeAction(ctx, id, ActionWithdraw, req)
}

// RebaseChange moves change id's base revisions to its namespaces'
// revisions now and reviews it again, voiding its approvals (POST
// .../rebase).
func (c *Client) RebaseChange(ctx context.Context, id string, req ChangeActionRequest) (*Change, error) {
	return c.changeAction(ctx, id, ActionRebase, req)
}

func (c *Client) changeAction(ctx context.Context, id, action string, req ChangeActionRequest) (*Change, error) {
	var body any
	if req != (ChangeActionRequest{}) {
		body = req
	}
	var ch Change
	if err := c.do(ctx, http.MethodPost, changePath(id, action), nil, body, &ch); err != nil {
		return nil, err
	}
	return &ch, nil
}

// PublishChange publishes approved change id (POST .../publish): all its
// namespaces in one transaction, or with req.Stages a rollout of its one
// namespace. Publishing a published change answers its revisions again.
func (c *Client) PublishChange(ctx context.Context, id string, req ChangePublishRequest) (*ChangePublishReply, error) {
	var body any
	if req.Reason != "" || len(req.Stages) > 0 {
		body = req
	}
	var r ChangePublishReply
	if err := c.do(ctx, http.MethodPost, changePath(id, ActionPublish), nil, body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// EmergencyPublish publishes req to namespace ns past its policies'
// approvals (POST /control/namespaces/{ns}/publish with emergency): the
// caller must be in a policy's emergency list and give a reason. It
// returns the revision and the id of the retro review it opened.
func (c *Client) EmergencyPublish(ctx context.Context, ns string, req PublishRequest) (*EmergencyReply, error) {
	req.Emergency = true
	var r EmergencyReply
	if err := c.do(ctx, http.MethodPost, nsPath(ns, "publish"), nil, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PutPolicy sets policy name (PUT /control/policies/{name}, admin scope)
// and returns it with its defaults filled in.
func (c *Client) PutPolicy(ctx context.Context, name string, p Policy) (*Policy, error) {
	var out Policy
	if err := c.do(ctx, http.MethodPut, "/control/policies/"+url.PathEscape(name), nil, p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPolicy returns policy name (GET /control/policies/{name});
// transport.ErrNotFound when there is none.
func (c *Client) GetPolicy(ctx context.Context, name string) (*Policy, error) {
	var out Policy
	if err := c.do(ctx, http.MethodGet, "/control/policies/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePolicy drops policy name (DELETE /control/policies/{name}).
func (c *Client) DeletePolicy(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/control/policies/"+url.PathEscape(name), nil, nil, nil)
}

func changePath(id, action string) string {
	p := "/control/changes/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}
