package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/transport"
)

// The console is a client of the control API's handler: each read and
// write is a request served in process by that handler, with the signed-in
// identity on its context (the handler reads it from there, as it reads
// the one its own authenticator puts there), so the scopes checked, the
// validation and the audit are the API's.

// apiError is a reply of the control API that is not a success.
type apiError struct {
	Status int
	Body   transport.ErrorBody
}

func (e *apiError) Error() string {
	if e.Body.Message != "" {
		return e.Body.Message
	}
	return fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
}

// recorder is the http.ResponseWriter an in-process call writes to.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

// caller makes the control API's requests for one console request.
type caller struct {
	api http.Handler
	ctx context.Context
	id  *access.Identity // nil: an open server's caller, authenticated by the API
}

// do sends method path (with query q and a JSON body in, when not nil) and
// decodes a success's reply into out (when not nil).
func (c caller) do(method, path string, q url.Values, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	ctx := c.ctx
	if c.id != nil {
		ctx = access.NewContext(ctx, *c.id)
	}
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, &body)
	if err != nil {
		return err
	}
	req.RemoteAddr = "console"
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: make(http.Header)}
	c.api.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status >= 300 {
		e := &apiError{Status: rec.status}
		_ = json.Unmarshal(rec.body.Bytes(), &e.Body)
		return e
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rec.body.Bytes(), out)
}

// nsPath is /control/namespaces/NS + rest.
func nsPath(ns, rest string) string {
	return "/control/namespaces/" + url.PathEscape(ns) + rest
}
