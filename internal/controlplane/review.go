package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/lint"
	"github.com/holdfast-dev/holdfast/schema"
)

// The review of a change: its semantic diff, its checks (the schema, the
// lints, the SDK gate), its reach and the hash an approval is bound to.

// review computes c's diff, checks, reach and hash against the
// namespaces' content now, olds (their revisions c's base revisions).
func (h *Handler) review(ctx context.Context, c *controlapi.Change, ps []namedPolicy, olds map[string]map[string]json.RawMessage) error {
	c.Diff, c.Checks = []controlapi.DiffEntry{}, []controlapi.Check{}
	for _, ns := range sortedNamespaces(c.Namespaces) {
		nc := c.Namespaces[ns]
		old := olds[ns]
		c.Diff = append(c.Diff, semanticDiff(ns, old, nc.Puts, nc.Deletes)...)
		next, entry, err := h.schemaPart(ctx, ns, nc)
		if err != nil {
			return err
		}
		if entry != nil {
			c.Diff = append(c.Diff, *entry)
		}
		checks, err := h.contentChecks(ctx, ns, old, nc.Puts, nc.Deletes, next)
		if err != nil {
			return err
		}
		c.Checks = append(c.Checks, checks...)
	}
	c.Hash = changeHash(c)
	reach, err := h.reach(ctx, c, ps)
	if err != nil {
		return err
	}
	c.Reach = reach
	c.Checks = append(c.Checks, minSDKChecks(c, reach)...)
	return nil
}

// nextSchema is the schema a change gives its namespace: sch, nil when
// it drops the namespace's schema.
type nextSchema struct{ sch *schema.Schema }

// compileSchema compiles a change's schema for ns (the bounds of PUT
// schema: schema.Compile's).
func compileSchema(ns string, raw json.RawMessage) (*schema.Schema, error) {
	sch, err := schema.Compile(raw)
	if err != nil {
		return nil, badRequest("namespace %q: schema: %v", ns, err)
	}
	return sch, nil
}

// schemaPart reads the schema part of nc, ns's part of a change: the
// schema it gives ns (nil: ns keeps its own) and its diff entry.
func (h *Handler) schemaPart(ctx context.Context, ns string, nc controlapi.NamespaceChange) (*nextSchema, *controlapi.DiffEntry, error) {
	if nc.Schema == nil && !nc.DeleteSchema {
		return nil, nil, nil
	}
	old, err := h.cfg.Store.Schema(ctx, ns)
	switch {
	case errors.Is(err, ErrNoSchema):
		old = nil
	case err != nil:
		return nil, nil, err
	}
	e := controlapi.DiffEntry{Namespace: ns, Op: controlapi.OpSchema}
	if old != nil {
		e.Old = compact(old)
	}
	if nc.DeleteSchema {
		if old == nil {
			return nil, nil, badRequest("namespace %q has no schema to delete", ns)
		}
		e.Kind = controlapi.DiffRemoved
		return &nextSchema{}, &e, nil
	}
	sch, err := compileSchema(ns, nc.Schema)
	if err != nil {
		return nil, nil, err
	}
	e.New = nc.Schema
	switch {
	case old == nil:
		e.Kind = controlapi.DiffAdded
	case bytes.Equal(e.Old, compact(nc.Schema)):
		e.Kind = controlapi.DiffUnchanged
	default:
		e.Kind = controlapi.DiffChanged
	}
	return &nextSchema{sch: sch}, &e, nil
}

// contentChecks runs ns's schema (next's, when set) and lints over old
// with puts and deletes applied.
func (h *Handler) contentChecks(ctx context.Context, ns string, old map[string]json.RawMessage, puts map[string]json.RawMessage, deletes []string, next *nextSchema) ([]controlapi.Check, error) {
	sc := controlapi.Check{Name: "schema", Namespace: ns, Kind: controlapi.CheckSchema, Result: controlapi.CheckPass}
	var se *SchemaError
	var ve *schema.ValidationError
	var err error
	switch {
	case next == nil:
		err = h.cfg.Store.Check(ctx, ns, Write{Puts: puts, Deletes: deletes})
	case next.sch != nil:
		sc.Name = "schema (new)"
		err = next.sch.ValidateValues(applied(old, puts, deletes))
	default:
		sc.Name, sc.Message = "schema (new)", "the schema is deleted"
	}
	switch {
	case errors.As(err, &se):
		sc.Result, sc.Message = controlapi.CheckBlock, strings.Join(se.Failures, "; ")
	case errors.As(err, &ve):
		var msgs []string
		for _, f := range ve.Failures {
			msgs = append(msgs, f.String())
		}
		sc.Result, sc.Message = controlapi.CheckBlock, strings.Join(msgs, "; ")
	case err != nil && !isNotFound(err): // a namespace's first publish: its commit checks it
		return nil, err
	}
	lc, err := h.lintChecks(ctx, ns, old, puts, deletes)
	if err != nil {
		return nil, err
	}
	return append([]controlapi.Check{sc}, lc...), nil
}

// lintChecks runs ns's lints over old with puts and deletes applied.
func (h *Handler) lintChecks(ctx context.Context, ns string, old map[string]json.RawMessage, puts map[string]json.RawMessage, deletes []string) ([]controlapi.Check, error) {
	lints, err := h.lintsFor(ctx, ns)
	if err != nil || len(lints) == 0 {
		return nil, err
	}
	var checks []controlapi.Check
	in := lint.Input{Namespace: ns, Old: old, New: applied(old, puts, deletes), Puts: sortedKeys(puts), Deletes: slices.Sorted(slices.Values(deletes))}
	for _, l := range lints {
		checks = append(checks, l.Eval(ctx, in))
	}
	return checks, nil
}

// applied is old with puts and deletes applied (a new map).
func applied(old, puts map[string]json.RawMessage, deletes []string) map[string]json.RawMessage {
	next := make(map[string]json.RawMessage, len(old)+len(puts))
	for k, v := range old {
		next[k] = v
	}
	for k, v := range puts {
		next[k] = v
	}
	for _, k := range deletes {
		delete(next, k)
	}
	return next
}

// blocked returns the checks of cs that block (of kinds, all when none).
func blocked(cs []controlapi.Check, kinds ...string) []controlapi.Check {
	var out []controlapi.Check
	for _, c := range cs {
		if c.Result == controlapi.CheckBlock && (len(kinds) == 0 || slices.Contains(kinds, c.Kind)) {
			out = append(out, c)
		}
	}
	return out
}

// checkMessages is the checks as "ns: name: message" lines.
func checkMessages(cs []controlapi.Check) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Namespace+": "+c.Name+" ("+c.Result+"): "+c.Message)
	}
	return out
}

// reach counts the clients each namespace of c would reach now.
func (h *Handler) reach(ctx context.Context, c *controlapi.Change, ps []namedPolicy) (map[string]controlapi.Reach, error) {
	clients, err := h.reachable(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]controlapi.Reach, len(c.Namespaces))
	for ns := range c.Namespaces {
		rc := controlapi.Reach{BySDKVersion: map[string]int{}, MinSDKVersion: minSDK(ps, ns)}
		minV, hasMin := parseVersion(rc.MinSDKVersion)
		for _, cl := range clients {
			if cl.Namespace != ns {
				continue
			}
			rc.Live++
			rc.BySDKVersion[cl.SDKVersion]++
			if hasMin {
				// A client that reports no version counts as below.
				if v, ok := parseVersion(cl.SDKVersion); !ok || compareVersions(v, minV) < 0 {
					rc.BelowMin++
				}
			}
		}
		out[ns] = rc
	}
	return out, nil
}

// reachable returns the clients a change reaches: those reported on their
// namespaces that are live now (connected and confirmed, directly or
// through a relay). The one place that says which clients count.
func (h *Handler) reachable(ctx context.Context) ([]controlapi.ClientState, error) {
	cs, err := h.cfg.Store.Clients(ctx)
	if err != nil {
		return nil, err
	}
	live := cs.Clients[:0:0]
	for _, c := range cs.Clients {
		if c.State == controlapi.ClientLive {
			live = append(live, c)
		}
	}
	return live, nil
}

// minSDKChecks are the SDK gate's checks of c: block for a namespace
// whose reach has clients below its min_sdk_version (warn when the
// author allowed old SDKs).
func minSDKChecks(c *controlapi.Change, reach map[string]controlapi.Reach) []controlapi.Check {
	var out []controlapi.Check
	for _, ns := range sortedNamespaces(c.Namespaces) {
		rc := reach[ns]
		if rc.MinSDKVersion == "" {
			continue
		}
		ck := controlapi.Check{Name: "min_sdk_version", Namespace: ns, Kind: controlapi.CheckMinSDK, Result: controlapi.CheckPass,
			Message: fmt.Sprintf("%d of %d live clients below %s", rc.BelowMin, rc.Live, rc.MinSDKVersion)}
		if rc.BelowMin > 0 {
			ck.Result = controlapi.CheckBlock
			if c.AllowOldSDK {
				ck.Result, ck.Message = controlapi.CheckWarn, ck.Message+" (allowed: "+c.AllowOldSDKReason+")"
			}
		}
		out = append(out, ck)
	}
	return out
}

// minSDK is the highest min_sdk_version of the policies matching ns.
func minSDK(ps []namedPolicy, ns string) string {
	best := ""
	var bv [3]int
	for _, p := range ps {
		v, ok := parseVersion(p.MinSDKVersion)
		if !ok || !matches([]string{p.Namespaces}, ns) {
			continue
		}
		if best == "" || compareVersions(v, bv) > 0 {
			best, bv = p.MinSDKVersion, v
		}
	}
	return best
}

// parseVersion reads "1.2.3" (a "v" before it, a pre-release or build
// after it ignored).
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func compareVersions(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			return a[i] - b[i]
		}
	}
	return 0
}

// semanticDiff is what puts and deletes do to old, key by key, sorted.
func semanticDiff(ns string, old, puts map[string]json.RawMessage, deletes []string) []controlapi.DiffEntry {
	var out []controlapi.DiffEntry
	for _, k := range sortedKeys(puts) {
		e := controlapi.DiffEntry{Namespace: ns, Key: k, Op: controlapi.OpPut, New: puts[k], NewType: jsonType(puts[k])}
		switch o, ok := old[k]; {
		case !ok:
			e.Kind = controlapi.DiffAdded
		case jsonType(o) != e.NewType:
			e.Kind, e.Old, e.OldType = controlapi.DiffTypeChanged, o, jsonType(o)
		case bytes.Equal(compact(o), compact(puts[k])):
			e.Kind, e.Old, e.OldType = controlapi.DiffUnchanged, o, jsonType(o)
		default:
			e.Kind, e.Old, e.OldType = controlapi.DiffChanged, o, jsonType(o)
		}
		out = append(out, e)
	}
	for _, k := range slices.Sorted(slices.Values(deletes)) {
		e := controlapi.DiffEntry{Namespace: ns, Key: k, Op: controlapi.OpDelete, Kind: controlapi.DiffRemoved}
		if o, ok := old[k]; ok {
			e.Old, e.OldType = o, jsonType(o)
		}
		out = append(out, e)
	}
	return out
}

// jsonType is the type of a JSON value: integer and number apart.
func jsonType(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	var n json.Number
	if json.Unmarshal(v, &n) == nil {
		if _, err := n.Int64(); err == nil {
			return "integer"
		}
	}
	return "number"
}

func compact(v json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return v
	}
	return b.Bytes()
}

// changeHash is the hash an approval is bound to: c's content, its base
// revisions and its checks' results, the SDK gate's left out (it counts
// clients, which move; publish checks it again).
func changeHash(c *controlapi.Change) string {
	var checks []controlapi.Check
	for _, ck := range c.Checks {
		if ck.Kind != controlapi.CheckMinSDK {
			checks = append(checks, ck)
		}
	}
	data, _ := json.Marshal(struct {
		N map[string]controlapi.NamespaceChange `json:"n"`
		C []controlapi.Check                    `json:"c"`
	}{c.Namespaces, checks}) // maps marshal sorted by key
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func sortedNamespaces(m map[string]controlapi.NamespaceChange) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
