package acks

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/wire"
	"github.com/holdfast-dev/holdfast/transport"
)

// sizedUp is a cohortUp that refuses, as a server's body limit would
// (transport.ErrTooLarge), a report of more than limit bytes.
type sizedUp struct {
	*cohortUp
	limit, largest int
}

func (u *sizedUp) AckCohort(ctx context.Context, relayID string, b json.RawMessage) error {
	u.largest = max(u.largest, len(b))
	if len(b) > u.limit {
		return transport.ErrTooLarge
	}
	return u.cohortUp.AckCohort(ctx, relayID, b)
}

// When a flush's outcomes make more runs than one report may hold (two
// publishes in quick succession leave a namespace's clients at either
// revision, slot by slot), they go in several reports, each within the
// limit, not in one that no server takes.
func TestCohortSplitsOutcomesOfManyRuns(t *testing.T) {
	up := newCohortUp()
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	n := transport.MaxCohortRuns + 1000
	var acks []transport.Ack
	for i := range n {
		acks = append(acks, applied("c"+strconv.Itoa(i), "app", 1))
	}
	send(t, q, acks...)
	for i := range acks {
		acks[i].Revision = int64(1 + i%2) // every other slot a run of its own
	}
	if err := q.send(context.Background(), acks); err != nil {
		t.Fatalf("%d clients split between two revisions: %v", n, err)
	}
	got := up.applied("app")
	for i := range n {
		if want := int64(1 + i%2); got["c"+strconv.Itoa(i)] != want {
			t.Fatalf("c%d at %d, want %d", i, got["c"+strconv.Itoa(i)], want)
		}
	}
}

// A report stays within a server's 1 MiB body limit, however long its
// clients' errors and ids: one too large would be refused again and again
// (413), and with it every outcome of the relay.
func TestCohortReportsFitTheBodyLimit(t *testing.T) {
	up := &sizedUp{cohortUp: newCohortUp(), limit: 1 << 20}
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	var acks []transport.Ack
	long := strings.Repeat("<", transport.MaxClientIDBytes-8) // 6 bytes each in JSON
	for i := range wire.MaxCohortMembers {
		a := applied(long+strconv.Itoa(i), "app", 1)
		if i < 400 { // each its own error, of the most an ack may carry
			a.Status, a.Error = transport.AckRejected, strconv.Itoa(i)+strings.Repeat("e", transport.MaxAckErrorBytes)
		}
		acks = append(acks, a)
	}
	if err := q.send(context.Background(), acks); err != nil {
		t.Fatalf("largest report %d bytes: %v", up.largest, err)
	}
	if got := up.applied("app"); len(got) != wire.MaxCohortMembers-400 {
		t.Errorf("%d applied, want %d", len(got), wire.MaxCohortMembers-400)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.nacks) != 400 {
		t.Errorf("%d nacks, want 400", len(up.nacks))
	}
}

// A relay's plain ack waits for a cohort report only when the upstream
// takes them: an upstream that predates cohorts, behind a source that
// could send them (every HTTPSource), hears it in the narrow window, as
// before.
func TestCohortHoldOnlyForAnUpstreamThatTakesCohorts(t *testing.T) {
	up := newCohortUp()
	up.offered = false
	q := New(up, slog.New(slog.DiscardHandler), "relay-1")
	before := time.Now()
	q.Forward(applied("c1", "app", 1), false)
	q.mu.Lock()
	wait := q.due.Sub(before)
	q.mu.Unlock()
	if wait > ackDelayMax {
		t.Errorf("due in %v, want within %v", wait, ackDelayMax)
	}
}
