package tokentable_test

import (
	"fmt"

	"github.com/holdfast-dev/holdfast/access"
	"github.com/holdfast-dev/holdfast/internal/tokentable"
)

// A Table authenticates against records as a store keeps them: the
// secret's hash, never the secret. A server's cache and a relay's copy
// replace them whole when the store's tokens change.
func ExampleTable() {
	secret := access.NewSecret() // shown once to whoever asked for the token
	records := []access.Record{{
		Name:   "payments-svc",
		Hash:   access.HashSecret(secret),
		Scopes: access.Scopes{Data: []string{"payments.*"}},
	}}
	table := tokentable.NewTable()
	if err := table.SetRecords(records, true); err != nil {
		fmt.Println(err)
		return
	}
	toks := access.FromAuthenticator(table, "the store's tokens") // for relay.WithTokens
	id, ok := toks.AuthenticateHeader("Bearer " + secret)
	fmt.Println(id.Name, ok, id.MayRead("payments.prod"), id.IsAdmin())

	_ = table.SetRecords(nil, true) // revoked
	_, ok = toks.AuthenticateHeader("Bearer " + secret)
	fmt.Println(ok)
	// Output:
	// payments-svc true true false
	// false
}
