package controlplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/jsonscan"
	"github.com/holdfast-dev/holdfast/internal/rollout"
	"github.com/holdfast-dev/holdfast/transport"
)

// The one reading of a control request: its {ns}, its query and its body.

// pathNamespace reads and checks the {ns} path segment.
func pathNamespace(r *http.Request) (string, error) {
	ns := r.PathValue("ns")
	if err := transport.ValidateNamespace(ns); err != nil {
		return "", badRequest("%v", err)
	}
	return ns, nil
}

// namespaceBody reads a write's {ns}, then its JSON body into v (see
// ReadJSON): the namespace is checked before any byte of the body is.
func namespaceBody(w http.ResponseWriter, r *http.Request, limit int64, v any, emptyOK bool) (string, error) {
	ns, err := pathNamespace(r)
	if err != nil {
		return "", err
	}
	return ns, ReadJSON(w, r, limit, v, emptyOK)
}

// readBody reads a body of at most limit bytes (larger: an
// *http.MaxBytesError, 413).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if err != nil && !errors.As(err, &mbe) {
		return nil, badRequest("reading the body: %v", err) // cut short: the caller's
	}
	return data, err
}

// ReadJSON decodes a body of at most limit bytes into v, refusing invalid
// UTF-8, unknown fields and trailing data (400; larger: 413). An empty
// body (or only white space) leaves v as it is when emptyOK.
func ReadJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, emptyOK bool) error {
	data, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	return decodeJSON(data, v, emptyOK)
}

// decodeJSON decodes exactly one JSON value from data into v, as
// ReadJSON.
func decodeJSON(data []byte, v any, emptyOK bool) error {
	if emptyOK && len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := jsonscan.CheckUnicode(string(data)); err != nil {
		// JSON text is UTF-8: a value of invalid UTF-8 would be stored
		// as it came and served as JSON that is not, and an escape of
		// half a surrogate pair would be read as U+FFFD without a word.
		return badRequest("body: not valid UTF-8 text (JSON text must be): %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("empty body")
		}
		return badRequest("body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("body: trailing data after the JSON value")
	}
	return nil
}

// query reads a request's query, refusing parameters other than allowed
// and any given twice, so that a typo is not silently ignored.
func query(r *http.Request, allowed ...string) (map[string]string, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("query: %v", err)
	}
	out := make(map[string]string, len(q))
	for k, v := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			return nil, badRequest("unknown query parameter %q (known: %s)", k, strings.Join(allowed, ", "))
		}
		if len(v) != 1 {
			return nil, badRequest("query parameter %q given %d times", k, len(v))
		}
		out[k] = v[0]
	}
	return out, nil
}

// intParam parses q[name], if present, as an integer of at least lowest.
func intParam(q map[string]string, name string, lowest int64) (n int64, ok bool, err error) {
	s, ok := q[name]
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil || n < lowest {
		return 0, true, badRequest("%s=%q: want an integer of at least %d", name, s, lowest)
	}
	return n, true, nil
}

// timeParam parses an RFC 3339 time; a "+" of a zone offset that came
// unescaped (curl) reads as a space, which RFC 3339 never holds.
func timeParam(name, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.ReplaceAll(s, " ", "+"))
	if err != nil {
		return time.Time{}, badRequest("%s=%q: want an RFC 3339 time, e.g. 2026-12-01T14:03:00Z", name, s)
	}
	return t, nil
}

// durationParam parses a body's duration: a Go duration ("1.5s") or
// whole seconds ("30"), as the data plane's.
func durationParam(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := dataplane.ParseDuration(s)
	if err != nil {
		return 0, badRequest("%s: %v", name, err)
	}
	return d, nil
}

// checkChange checks a write's keys: each valid and not reserved, none
// both put and deleted.
func checkChange(puts map[string]json.RawMessage, deletes []string) error {
	for k := range puts {
		if err := rollout.CheckKey(k); err != nil {
			return badRequest("%v", err)
		}
	}
	for _, k := range deletes {
		if err := rollout.CheckKey(k); err != nil {
			return badRequest("%v", err)
		}
		if _, ok := puts[k]; ok {
			return badRequest("key %q is both put and deleted", k)
		}
	}
	return nil
}

// Bounds of a write's audit fields (its actor, whom it acted for, its
// reason): holdfast server's store's, on every server.
const (
	MaxActorBytes  = controlapi.MaxActorBytes
	MaxReasonBytes = controlapi.MaxReasonBytes
)

// CheckText checks an actor or a reason a request names: at most limit
// bytes of UTF-8 without control characters, which would forge lines or
// columns where the audit is shown (a log, a terminal's table). A record
// already stored with them (written before the check) is still served.
func CheckText(field, s string, limit int) error {
	switch {
	case len(s) > limit:
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, field, limit)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalid, field)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%w: %s has a control character", ErrInvalid, field)
	}
	return nil
}

// checkAudit checks a request's actor and reason.
func checkAudit(actor, reason string) error {
	if err := CheckText("actor", actor, MaxActorBytes); err != nil {
		return err
	}
	return CheckText("reason", reason, MaxReasonBytes)
}
