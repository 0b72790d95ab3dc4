package gate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// controllerGate is internal/rollout/controller's Gate, as that package
// declares it: Bound must keep its shape.
type controllerGate interface {
	Check(ctx context.Context) (breach bool, detail string, err error)
}

var _ controllerGate = (*Bound)(nil)

func TestBound(t *testing.T) {
	p := newFakeProm(t)
	now := t0
	raw := json.RawMessage(`{"prometheus":"` + p.srv.URL + `","query":"app_errors_total","max":2,"grace":"10s"}`)
	b, err := FromJSON(raw, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var g controllerGate = b

	p.set(200, vector("1", "2"))
	if err := b.Start(context.Background()); !errors.Is(err, ErrSeveralSeries) {
		t.Fatalf("start on several series: %v", err)
	}
	p.set(200, vector())
	if err := b.Start(context.Background()); err != nil || !b.FailingSince().Equal(now) {
		t.Fatalf("start on no series: %v, failing since %v", err, b.FailingSince())
	}
	p.set(200, vector("1"))
	if breach, detail, err := g.Check(context.Background()); breach || err != nil || !strings.Contains(detail, "value 1 at or under max 2") {
		t.Fatalf("under max: %v %q %v", breach, detail, err)
	}
	p.set(200, vector())
	now = now.Add(time.Second)
	if breach, _, err := g.Check(context.Background()); breach || !errors.Is(err, ErrNoSeries) {
		t.Fatalf("no series within the grace: %v %v", breach, err)
	}
	// A controller that takes over resumes the failure from the start.
	b.Resume(t0)
	now = now.Add(10 * time.Second)
	breach, detail, err := g.Check(context.Background())
	if !breach || !errors.Is(err, ErrNoSeries) || !strings.Contains(detail, "failing for 11s (grace 10s)") {
		t.Fatalf("no series past the grace: %v %q %v", breach, detail, err)
	}
	if last := b.Last(); last.Status != Breach || !last.At.Equal(now) {
		t.Fatalf("last %+v", last)
	}
	p.set(200, vector("2.5"))
	if breach, detail, err := g.Check(context.Background()); !breach || err != nil || !strings.Contains(detail, "value 2.5 above max 2") {
		t.Fatalf("above max: %v %q %v", breach, detail, err)
	}

	for _, bad := range []string{`{"prometheus":"` + p.srv.URL + `","query":"x"}`, `[]`, `{"prometheus":"http://p","query":"x","max":1,"x":2}`} {
		if _, err := FromJSON(json.RawMessage(bad), nil); !errors.Is(err, ErrSpec) {
			t.Errorf("FromJSON(%s): %v", bad, err)
		}
	}
}
