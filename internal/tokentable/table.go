// Package tokentable holds the token records that a holdfast server
// (server/tokens, from its store) or relay (Remote, from its server)
// currently knows, and authenticates callers against them: access's
// Authenticator and SubjectAuthenticator over the store's records.
package tokentable

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/access"
)

// Table authenticates against a set of Records, replaced whole with
// SetRecords (a server's cache of its store, a relay's copy of its
// server's). Authenticate looks a secret up by its SHA-256 and compares
// the record's hash in constant time; a record that has expired does not
// authenticate. It is safe for concurrent use.
type Table struct {
	state atomic.Pointer[tableState]
	now   func() time.Time
	used  func(name string)

	// setMu orders SetRecords, so that the changes told to the
	// subscribers follow each other as the records do.
	setMu sync.Mutex
	subMu sync.Mutex
	subs  map[int]func(access.Change)
	next  int
}

type tableState struct {
	byDigest  map[[sha256.Size]byte]*tableEntry
	bySubject map[string]*tableEntry
	records   []access.Record
	required  bool
}

type tableEntry struct {
	rec    access.Record
	digest [sha256.Size]byte
	id     access.Identity
}

// TableOption configures a Table.
type TableOption interface{ apply(*Table) }

type tableOptionFunc func(*Table)

func (f tableOptionFunc) apply(t *Table) { f(t) }

// WithClock sets the clock expiry is measured against (default time.Now).
func WithClock(now func() time.Time) TableOption {
	return tableOptionFunc(func(t *Table) { t.now = now })
}

// WithUse sets a function told the name of every token that
// authenticates (for a record of last use; it must not block).
func WithUse(fn func(name string)) TableOption {
	return tableOptionFunc(func(t *Table) { t.used = fn })
}

// NewTable returns an empty Table that requires tokens: it
// authenticates nobody until SetRecords.
func NewTable(opts ...TableOption) *Table {
	t := &Table{now: time.Now, used: func(string) {}}
	for _, o := range opts {
		if o != nil {
			o.apply(t)
		}
	}
	t.state.Store(&tableState{required: true})
	return t
}

// SetRecords replaces the table's records. Records that do not validate
// are left out, and returned as errors. When required is false the table
// authenticates every caller, with or without a secret, as Anonymous with
// every scope: a store that has never had an admin token is open.
func (t *Table) SetRecords(records []access.Record, required bool) error {
	st := &tableState{byDigest: make(map[[sha256.Size]byte]*tableEntry, len(records)),
		bySubject: make(map[string]*tableEntry), required: required}
	var errs []error
	for _, r := range records {
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		st.records = append(st.records, r)
		if r.Subject != "" {
			st.bySubject[r.Subject] = &tableEntry{rec: r, id: access.NewIdentity(r.Subject, r.Scopes).WithExpiry(r.Expires)}
			continue
		}
		var d [sha256.Size]byte
		_, _ = hex.Decode(d[:], []byte(strings.TrimPrefix(r.Hash, "sha256:"))) // Validate checked the form
		st.byDigest[d] = &tableEntry{rec: r, digest: d, id: access.NewIdentity(r.Name, r.Scopes).WithExpiry(r.Expires)}
	}
	t.setMu.Lock()
	defer t.setMu.Unlock()
	old := t.state.Swap(st)
	if c, ok := changes(old, st); ok {
		t.notify(c)
	}
	return errors.Join(errs...)
}

// notify tells the subscribers of NotifyChanges c.
func (t *Table) notify(c access.Change) {
	t.subMu.Lock()
	subs := make([]func(access.Change), 0, len(t.subs))
	for _, fn := range t.subs {
		subs = append(subs, fn)
	}
	t.subMu.Unlock()
	for _, fn := range subs {
		fn(c)
	}
}

// NotifyChanges tells fn, after each SetRecords that changed them, which
// identities' records changed: removed, or another hash, subject, scope
// or expiry (access.Notifier). fn must not block.
func (t *Table) NotifyChanges(fn func(access.Change)) (stop func()) {
	t.subMu.Lock()
	defer t.subMu.Unlock()
	if t.subs == nil {
		t.subs = make(map[int]func(access.Change))
	}
	id := t.next
	t.next++
	t.subs[id] = fn
	return func() {
		t.subMu.Lock()
		delete(t.subs, id)
		t.subMu.Unlock()
	}
}

// changes returns what tells the identities of old whose record new
// changes or lacks (by identity name: a token's name, a certificate's
// subject); every one when whether tokens are required changed.
func changes(old, new *tableState) (access.Change, bool) {
	if old.required != new.required {
		return access.Change{All: true}, true
	}
	if !new.required {
		return access.Change{}, false // everyone is anonymous, before and after
	}
	byName := func(st *tableState) map[string]access.Record {
		m := make(map[string]access.Record, len(st.records))
		for _, r := range st.records {
			if r.Subject != "" {
				m[r.Subject] = r
			} else {
				m[r.Name] = r
			}
		}
		return m
	}
	before, after := byName(old), byName(new)
	var names []string
	for name, r := range before {
		if n, ok := after[name]; !ok || !sameRecord(r, n) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return access.Change{Names: names}, len(names) > 0
}

// sameRecord reports whether a and b authenticate the same callers with
// the same scopes until the same time.
func sameRecord(a, b access.Record) bool {
	return a.Name == b.Name && a.Hash == b.Hash && a.Subject == b.Subject && a.Expires.Equal(b.Expires) &&
		a.Admin == b.Admin && a.Relay == b.Relay && slices.Equal(a.Control, b.Control) && slices.Equal(a.Data, b.Data)
}

// Records returns the table's records and whether it requires tokens.
func (t *Table) Records() ([]access.Record, bool) {
	st := t.state.Load()
	return slices.Clone(st.records), st.required
}

// Required reports whether the table requires tokens.
func (t *Table) Required() bool { return t.state.Load().required }

// anonymous is every caller of a table that does not require tokens.
var anonymous = access.NewIdentity(access.Anonymous, access.Scopes{Control: []string{"*"}, Data: []string{"*"}, Admin: true, Relay: true})

// Authenticate returns the identity of the record whose hash is secret's,
// if it has not expired.
//
// The lookup is a map's, keyed by the secret's SHA-256: its time may
// depend on how that digest compares with the stored ones, which tells
// an attacker about hashes of their own guesses, nothing that brings a
// 256-bit secret closer. The hash found is then compared in constant
// time.
func (t *Table) Authenticate(secret string) (access.Identity, bool) {
	st := t.state.Load()
	if !st.required {
		return anonymous, true
	}
	d := sha256.Sum256([]byte(secret))
	e, ok := st.byDigest[d]
	if !ok || subtle.ConstantTimeCompare(d[:], e.digest[:]) != 1 || e.rec.Expired(t.now()) {
		return access.Identity{}, false
	}
	t.used(e.rec.Name)
	return e.id, true
}

// AuthenticateDigest is Authenticate for the SHA-256 digest of a secret
// (access.DigestAuthenticator: a console session's re-check).
func (t *Table) AuthenticateDigest(d [sha256.Size]byte) (access.Identity, bool) {
	st := t.state.Load()
	if !st.required {
		return anonymous, true
	}
	e, ok := st.byDigest[d]
	if !ok || subtle.ConstantTimeCompare(d[:], e.digest[:]) != 1 || e.rec.Expired(t.now()) {
		return access.Identity{}, false
	}
	return e.id, true
}

// AuthenticateSubject returns the identity of the certificate record
// whose subject is subject, if it has not expired: named by the subject,
// so that the audit shows who the certificate says. Subjects are not
// secrets: the listener has verified the certificate before.
func (t *Table) AuthenticateSubject(subject string) (access.Identity, bool) {
	st := t.state.Load()
	if !st.required {
		return anonymous, true
	}
	e, ok := st.bySubject[subject]
	if !ok || e.rec.Expired(t.now()) {
		return access.Identity{}, false
	}
	t.used(e.rec.Name)
	return e.id, true
}
