package access_test

import (
	"fmt"

	"github.com/holdfast-dev/holdfast/access"
)

func Example() {
	toks, err := access.New(
		access.Token{Name: "deploy-bot", Secret: "deploy-bot-secret-0001", Control: []string{"payments.*"}},
		access.Token{Name: "payments-svc", Secret: "payments-svc-secret-01", Data: []string{"payments.*"}},
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, ok := toks.AuthenticateHeader("Bearer payments-svc-secret-01")
	fmt.Println(id.Name, ok)
	fmt.Println(id.MayRead("payments.prod"), id.MayRead("fraud.prod"), id.MayControl("payments.prod"))
	_, ok = toks.Authenticate("not-a-token-of-the-set")
	fmt.Println(ok)
	// Output:
	// payments-svc true
	// true false false
	// false
}
