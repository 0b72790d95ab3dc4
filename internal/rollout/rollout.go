package rollout

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/holdfast-dev/holdfast/transport"
)

// Key is the reserved key whose value is a namespace's staged rollout, when
// one is running. No publish may write it; a client never serves it.
const Key = ReservedPrefix + "rollout"

// ReservedPrefix begins every key reserved to holdfast itself: a publish
// of such a key is refused.
const ReservedPrefix = "$holdfast/"

// Reserved reports whether key is reserved to holdfast.
func Reserved(key string) bool { return strings.HasPrefix(key, ReservedPrefix) }

// MaxIDLen bounds a rollout's id.
const MaxIDLen = 64

// Staged is the value of Key: a change staged to the clients of the
// current stage.
type Staged struct {
	// ID names the rollout; it seeds every client's place in the order of
	// stages, so that each rollout picks its canaries afresh.
	ID string `json:"id"`
	// Stage is the percentage of the namespace's clients the stage is
	// meant to cover (informational: Cut decides).
	Stage float64 `json:"stage"`
	// Cut is the highest Hash in the stage, 16 lowercase hex digits on the
	// wire (a JSON number would lose bits in float64 decoders).
	Cut uint64 `json:"-"`
	// Puts and Deletes are the staged change, applied on the base by
	// clients in the stage.
	Puts    map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes []string                   `json:"deletes,omitempty"`
	// Prevalidate asks every client, in the stage or not, to check the
	// staged change against its own checks and report a would-nack
	// (transport.AckWouldReject) when it fails them.
	Prevalidate bool `json:"prevalidate,omitempty"`
}

// wireStaged is Staged as JSON, with its cut in hex.
type wireStaged struct {
	ID          string                     `json:"id"`
	Stage       float64                    `json:"stage"`
	Cut         string                     `json:"cut"`
	Puts        map[string]json.RawMessage `json:"puts,omitempty"`
	Deletes     []string                   `json:"deletes,omitempty"`
	Prevalidate bool                       `json:"prevalidate,omitempty"`
}

// ErrMalformed: the value of Key is not a valid staged rollout. A client
// rejects the revision that carries it (its last good keeps serving).
var ErrMalformed = errors.New("rollout: malformed staged rollout")

// Encode returns s as the value of Key: compact JSON, keys sorted.
func Encode(s *Staged) (json.RawMessage, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(wireStaged{ID: s.ID, Stage: s.Stage, Cut: fmt.Sprintf("%016x", s.Cut),
		Puts: s.Puts, Deletes: s.Deletes, Prevalidate: s.Prevalidate})
}

// Decode parses the value of Key.
func Decode(raw []byte) (*Staged, error) {
	var w wireStaged
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if d.More() {
		return nil, fmt.Errorf("%w: data after the object", ErrMalformed)
	}
	if len(w.Cut) != 16 {
		return nil, fmt.Errorf("%w: cut %q: want 16 hex digits", ErrMalformed, w.Cut)
	}
	cut, err := strconv.ParseUint(w.Cut, 16, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: cut %q: want 16 hex digits", ErrMalformed, w.Cut)
	}
	s := &Staged{ID: w.ID, Stage: w.Stage, Cut: cut, Puts: w.Puts, Deletes: w.Deletes, Prevalidate: w.Prevalidate}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// validate checks what a client relies on: an id, a stage in (0, 100],
// valid keys, none reserved, none both put and deleted, values present.
func (s *Staged) validate() error {
	if s.ID == "" || len(s.ID) > MaxIDLen {
		return fmt.Errorf("%w: id %q: want 1..%d bytes", ErrMalformed, s.ID, MaxIDLen)
	}
	if !(s.Stage > 0 && s.Stage <= 100) {
		return fmt.Errorf("%w: stage %v: want a percentage in (0, 100]", ErrMalformed, s.Stage)
	}
	for k, v := range s.Puts {
		if err := CheckKey(k); err != nil {
			return fmt.Errorf("%w: staged change: %v", ErrMalformed, err)
		}
		if len(v) == 0 || !json.Valid(v) {
			return fmt.Errorf("%w: put of %q: not a JSON value", ErrMalformed, k)
		}
	}
	for _, k := range s.Deletes {
		if err := CheckKey(k); err != nil {
			return fmt.Errorf("%w: staged change: %v", ErrMalformed, err)
		}
		if _, ok := s.Puts[k]; ok {
			return fmt.Errorf("%w: %q both put and deleted", ErrMalformed, k)
		}
	}
	return nil
}

// ErrReservedKey is a write of a key reserved to holdfast (ReservedPrefix).
var ErrReservedKey = errors.New("key reserved to holdfast")

// CheckKey checks a key a publish or a rollout writes: valid
// (transport.ValidateKey), and not reserved (ErrReservedKey). Callers wrap
// its error with their own kind of refusal.
func CheckKey(k string) error {
	if err := transport.ValidateKey(k); err != nil {
		return err
	}
	if Reserved(k) {
		return fmt.Errorf("%w: %q (prefix %q)", ErrReservedKey, k, ReservedPrefix)
	}
	return nil
}

// Hash is a client's place in rollout id's order: the first eight bytes of
// SHA-256(id, NUL, clientID). Uniform, so a cut covers its share of any
// large fleet; seeded by the rollout, so no client is every rollout's
// canary.
func Hash(id, clientID string) uint64 {
	h := sha256.New()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(clientID))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// Member reports whether the client clientID is in s's stage.
func (s *Staged) Member(clientID string) bool { return Hash(s.ID, clientID) <= s.Cut }

// Count is how many of n known clients a stage of pct percent covers:
// ⌈n·pct/100⌉, at least one when n > 0.
func Count(n int, pct float64) int {
	if n <= 0 {
		return 0
	}
	k := int(math.Ceil(float64(n)*pct/100 - 1e-9))
	return min(max(k, 1), n)
}

// Cut returns the cut of a stage of pct percent over the known clients'
// hashes (in any order; not modified): the Count(len)-th smallest, so that
// exactly that many of them are in. It is never below floor (the previous
// stage's cut: a client in a stage stays in every later one). At 100% the
// cut is the top of the hash space, so every client is in, known or not;
// with no clients known it is pct's share of the space.
func Cut(hashes []uint64, pct float64, floor uint64) uint64 {
	if pct >= 100 {
		return math.MaxUint64
	}
	var cut uint64
	if k := Count(len(hashes), pct); k > 0 {
		sorted := slices.Sorted(slices.Values(hashes))
		cut = sorted[k-1]
	} else {
		cut = uint64(pct / 100 * math.MaxUint64)
	}
	return max(cut, floor)
}
