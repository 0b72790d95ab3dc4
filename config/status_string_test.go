package config

import (
	"errors"
	"testing"
	"time"
)

func TestErrorInfoString(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		e    ErrorInfo
		want string
	}{
		{"zero", ErrorInfo{}, "none"},
		{"current", ErrorInfo{Kind: ErrorNetwork, Message: "connection refused", Time: now.Add(-12 * time.Second)},
			"network: connection refused (12s ago)"},
		{"past", ErrorInfo{Kind: ErrorNetwork, Message: "connection refused", Time: now.Add(-12*time.Second - 300*time.Millisecond), Recovered: true},
			"network: connection refused (12s ago, since recovered)"},
		{"status code", ErrorInfo{Kind: ErrorResponse, StatusCode: 503, Message: "unavailable", Time: now.Add(-350 * time.Millisecond)},
			"response (HTTP 503): unavailable (350ms ago)"},
		{"minutes", ErrorInfo{Kind: ErrorBind, Message: `config: bind "t": bad`, Time: now.Add(-3 * time.Minute)},
			`bind: config: bind "t": bad (3m0s ago)`},
		{"no time", ErrorInfo{Kind: ErrorPersist, Message: "disk full"}, "persist: disk full"},
		{"future", ErrorInfo{Kind: ErrorClock, Message: "x", Time: now.Add(2 * time.Second)}, "clock: x (in 2s)"},
	}
	for _, tt := range tests {
		if got := tt.e.format(now); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if s := (ErrorInfo{Kind: ErrorNetwork, Message: "m", Time: time.Now()}).String(); s != "network: m (0s ago)" {
		t.Errorf("String() = %q", s)
	}
}

func TestStatusString(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		s    Status
		want string
	}{
		{"syncing", Status{Namespace: "payments", State: StateSyncing},
			"payments: Syncing, revision 0, staleness unknown (no max), from none"},
		{"fresh", Status{Namespace: "payments", State: StateFresh, Revision: 42, Origin: OriginNetwork,
			LastConfirmed: now, Staleness: 1200 * time.Millisecond, MaxStaleness: 30 * time.Second},
			"payments: Fresh, revision 42, staleness 1.2s (max 30s), from network"},
		{"recovered error", Status{Namespace: "payments", State: StateFresh, Revision: 42, Origin: OriginNetwork,
			LastConfirmed: now, MaxStaleness: time.Minute,
			LastError: ErrorInfo{Kind: ErrorNetwork, Message: "EOF", Time: now.Add(-12 * time.Second), Recovered: true}},
			"payments: Fresh, revision 42, staleness 0s (max 1m0s), from network, last error: network: EOF (12s ago, since recovered)"},
		{"endpoint", Status{Namespace: "payments", State: StateStale, Revision: 42, Origin: OriginNetwork,
			LastConfirmed: now, MaxStaleness: time.Minute, Endpoint: "http://relay-2:8080",
			LastError: ErrorInfo{Kind: ErrorNetwork, Message: "EOF", Time: now.Add(-time.Second)}},
			"payments: Stale, revision 42, staleness 0s (max 1m0s), from network, endpoint http://relay-2:8080, last error: network: EOF (1s ago)"},
		{"stale from disk, persist error", Status{Namespace: "p", State: StateStale, Revision: 7, Origin: OriginDisk,
			LastConfirmed: now.Add(-3 * time.Second), Staleness: 3 * time.Second,
			LastError:    ErrorInfo{Kind: ErrorNetwork, Message: "refused", Time: now.Add(-time.Second)},
			PersistError: ErrorInfo{Kind: ErrorPersist, Message: "disk full", Time: now.Add(-2 * time.Second), Err: errors.Join(errors.New("a"))}},
			"p: Stale, revision 7, staleness 3s (no max), from disk, last error: network: refused (1s ago), persist error: persist: disk full (2s ago)"},
		{"staged", Status{Namespace: "p", State: StateFresh, Revision: 9, Origin: OriginNetwork, LastConfirmed: now,
			Rollout: RolloutStatus{ID: "r-7", Stage: 12.5, Staged: true}},
			`p: Fresh, revision 9, staleness 0s (no max), from network, rollout "r-7" at 12.5%, serving the staged change`},
		{"base of a rollout", Status{Namespace: "p", State: StateFresh, Revision: 9, Origin: OriginNetwork, LastConfirmed: now,
			Rollout:   RolloutStatus{ID: "r-7", Stage: 1},
			LastError: ErrorInfo{Kind: ErrorNetwork, Message: "EOF", Time: now.Add(-time.Second)}},
			`p: Fresh, revision 9, staleness 0s (no max), from network, rollout "r-7" at 1%, serving the base, last error: network: EOF (1s ago)`},
	}
	for _, tt := range tests {
		if got := tt.s.format(now); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
	if got := (RolloutStatus{}).String(); got != "no rollout" {
		t.Errorf("zero RolloutStatus: %q", got)
	}
}
