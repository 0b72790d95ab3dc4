package rollout

import (
	"fmt"

	"github.com/holdfast-dev/holdfast/internal/snapshot"
)

// View is what one client serves of a namespace's content on the wire.
type View struct {
	// Served is the content to serve: the wire content itself when it
	// carries no rollout; else the base (without Key), with the staged
	// change applied when Member.
	Served *snapshot.Snapshot
	// Staged is the rollout the content carries; nil when none.
	Staged *Staged
	// Member: the client is in Staged's stage, and Served has its change.
	Member bool
	// Candidate, when Staged is set, is the base with the staged change
	// applied: Served for a member, what a non-member prevalidates.
	Candidate *snapshot.Snapshot
}

// Serve works out clientID's view of wire. A value of Key that does not
// decode, or a staged change that does not apply, is an error: the
// revision is rejected as any bad update is.
func Serve(wire *snapshot.Snapshot, clientID string) (View, error) {
	raw, ok := wire.Get(Key)
	if !ok {
		return View{Served: wire}, nil
	}
	s, err := Decode(raw.Raw())
	if err != nil {
		return View{}, err
	}
	base, err := wire.Apply(wire.Revision(), wire.CommittedAt(), nil, []string{Key})
	if err != nil {
		return View{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	cand, err := base.Apply(wire.Revision(), wire.CommittedAt(), s.Puts, s.Deletes)
	if err != nil {
		return View{}, fmt.Errorf("%w: staged change: %v", ErrMalformed, err)
	}
	v := View{Served: base, Staged: s, Member: s.Member(clientID), Candidate: cand}
	if v.Member {
		v.Served = cand
	}
	return v, nil
}
