package tokentable

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/peer"
)

func TestTableAuthenticate(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	secret := access.NewSecret()
	other := access.NewSecret()
	rec := func(name, secret string, s access.Scopes, expires time.Time) access.Record {
		return access.Record{Name: name, Hash: access.HashSecret(secret), Scopes: s, Expires: expires, Created: now.Add(-time.Hour)}
	}
	deploy := access.Scopes{Control: []string{"payments.*"}, Data: []string{"payments.*", "fraud.prod"}}
	for _, tc := range []struct {
		name     string
		records  []access.Record
		required bool
		secret   string
		wantOK   bool
		wantName string
		check    func(t *testing.T, id access.Identity)
	}{
		{name: "scopes and patterns", records: []access.Record{rec("deploy", secret, deploy, time.Time{})}, required: true, secret: secret,
			wantOK: true, wantName: "deploy", check: func(t *testing.T, id access.Identity) {
				for ns, want := range map[string]bool{"payments.prod": true, "payments.prod.eu": true, "payments": false, "fraud.prod": true, "fraud.dev": false} {
					if got := id.MayRead(ns); got != want {
						t.Errorf("MayRead(%q) = %v", ns, got)
					}
				}
				if !id.MayControl("payments.x") || id.MayControl("fraud.prod") || id.MayControlAll() || id.IsAdmin() || id.IsRelay() {
					t.Errorf("control scopes of %+v", id.Scopes())
				}
			}},
		{name: "admin and relay", records: []access.Record{rec("root", secret, access.Scopes{Admin: true, Relay: true}, time.Time{})}, required: true, secret: secret,
			wantOK: true, wantName: "root", check: func(t *testing.T, id access.Identity) {
				if !id.IsAdmin() || !id.IsRelay() || id.HasControl() || id.MayRead("a") {
					t.Errorf("scopes of %+v", id.Scopes())
				}
			}},
		{name: "not yet expired", records: []access.Record{rec("x", secret, deploy, now.Add(time.Second))}, required: true, secret: secret, wantOK: true, wantName: "x"},
		{name: "expired", records: []access.Record{rec("x", secret, deploy, now)}, required: true, secret: secret},
		{name: "revoked (no record)", records: []access.Record{rec("y", other, deploy, time.Time{})}, required: true, secret: secret},
		{name: "hash mismatch", records: []access.Record{rec("x", secret, deploy, time.Time{})}, required: true, secret: secret + "x"},
		{name: "empty secret", records: []access.Record{rec("x", secret, deploy, time.Time{})}, required: true, secret: ""},
		{name: "two records", records: []access.Record{rec("x", secret, deploy, time.Time{}), rec("y", other, access.Scopes{Data: []string{"*"}}, time.Time{})},
			required: true, secret: other, wantOK: true, wantName: "y"},
		{name: "open store: anyone, anonymous", required: false, secret: "", wantOK: true, wantName: access.Anonymous, check: func(t *testing.T, id access.Identity) {
			if !id.IsAdmin() || !id.MayControlAll() || !id.MayRead("any.thing") {
				t.Errorf("anonymous scopes %+v", id.Scopes())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var used []string
			tab := NewTable(WithClock(func() time.Time { return now }), WithUse(func(n string) { used = append(used, n) }))
			if err := tab.SetRecords(tc.records, tc.required); err != nil {
				t.Fatal(err)
			}
			id, ok := tab.Authenticate(tc.secret)
			if ok != tc.wantOK || id.Name != tc.wantName {
				t.Fatalf("Authenticate = %q, %v; want %q, %v", id.Name, ok, tc.wantName, tc.wantOK)
			}
			if tc.check != nil {
				tc.check(t, id)
			}
			if ok && tc.required && (len(used) != 1 || used[0] != tc.wantName) {
				t.Fatalf("uses reported %v", used)
			}
		})
	}
}

func TestTableRefusesInvalidRecords(t *testing.T) {
	good := access.Record{Name: "good", Hash: access.HashSecret("0123456789abcdef"), Scopes: access.Scopes{Data: []string{"*"}}}
	for _, bad := range []access.Record{
		{Name: "", Hash: good.Hash, Scopes: good.Scopes},
		{Name: ".dot", Hash: good.Hash, Scopes: good.Scopes},
		{Name: "a/b", Hash: good.Hash, Scopes: good.Scopes},
		{Name: "nohash", Hash: "0123", Scopes: good.Scopes},
		{Name: "md5", Hash: "md5:" + strings.Repeat("0", 64), Scopes: good.Scopes},
		{Name: "noscope", Hash: good.Hash},
		{Name: "badpattern", Hash: good.Hash, Scopes: access.Scopes{Data: []string{"["}}},
	} {
		tab := NewTable()
		err := tab.SetRecords([]access.Record{good, bad}, true)
		if !errors.Is(err, access.ErrInvalid) {
			t.Errorf("%+v: err %v, want access.ErrInvalid", bad, err)
		}
		if recs, _ := tab.Records(); len(recs) != 1 || recs[0].Name != "good" {
			t.Errorf("%+v: records kept %v", bad, recs)
		}
	}
}

// TestCertificateIdentities: a record with a subject authenticates a
// request whose verified client certificate has it, named by the subject,
// within its scopes and expiry; a bearer token decides when one is sent;
// a record with both a hash and a subject, or neither, is invalid.
func TestCertificateIdentities(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	secret := access.NewSecret()
	tab := NewTable(WithClock(func() time.Time { return now }))
	err := tab.SetRecords([]access.Record{
		{Name: "deploy-bot", Subject: "CN=deploy-bot,O=example", Scopes: access.Scopes{Control: []string{"app"}}, Created: now},
		{Name: "old-bot", Subject: "CN=old-bot", Scopes: access.Scopes{Data: []string{"*"}}, Expires: now.Add(-time.Minute), Created: now},
		{Name: "svc", Hash: access.HashSecret(secret), Scopes: access.Scopes{Data: []string{"app"}}, Created: now},
		{Name: "both", Hash: access.HashSecret(access.NewSecret()), Subject: "CN=both", Scopes: access.Scopes{Data: []string{"*"}}},
		{Name: "neither", Scopes: access.Scopes{Data: []string{"*"}}},
	}, true)
	if err == nil || !strings.Contains(err.Error(), `"both"`) || !strings.Contains(err.Error(), `"neither"`) {
		t.Fatalf("SetRecords: %v; want the records with both and neither refused", err)
	}
	toks := access.FromAuthenticator(tab)
	for _, tc := range []struct {
		name    string
		subject string // the verified certificate's; "" none
		bearer  string
		want    string // the identity's name; "" refused
	}{
		{"a known subject", "CN=deploy-bot,O=example", "", "CN=deploy-bot,O=example"},
		{"an unknown subject", "CN=stranger", "", ""},
		{"an expired identity", "CN=old-bot", "", ""},
		{"no certificate, no token", "", "", ""},
		{"a token decides over the certificate", "CN=deploy-bot,O=example", "Bearer " + secret, "svc"},
		{"a wrong token is not saved by the certificate", "CN=deploy-bot,O=example", "Bearer " + access.NewSecret(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.subject != "" {
				r = r.WithContext(peer.NewContext(r.Context(), peer.Peer{Subject: tc.subject}))
			}
			if tc.bearer != "" {
				r.Header.Set("Authorization", tc.bearer)
			}
			id, ok := toks.AuthenticateRequest(r)
			if got := map[bool]string{true: id.Name, false: ""}[ok]; got != tc.want {
				t.Fatalf("authenticated as %q (%v), want %q", id.Name, ok, tc.want)
			}
			if ok && tc.want == "CN=deploy-bot,O=example" && (!id.MayControl("app") || id.MayControl("other")) {
				t.Errorf("scopes of %q: %+v", id.Name, id.Scopes())
			}
		})
	}
}
