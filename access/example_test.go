package access_test

import (
	"fmt"

	"github.com/holdfast-dev/holdfast/access"
)

func Example() {
	toks, err := access.Parse([]byte(`{"tokens":[
		{"name":"deploy-bot","token":"deploy-bot-secret-0001","control":["payments.*"]},
		{"name":"payments-svc","token":"payments-svc-secret-01","data":["payments.*"]}
	]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	id, ok := toks.AuthenticateHeader("Bearer payments-svc-secret-01")
	fmt.Println(id.Name, ok)
	fmt.Println(id.MayRead("payments.prod"), id.MayRead("fraud.prod"), id.MayControl("payments.prod"))
	_, ok = toks.Authenticate("not-a-token-of-the-file")
	fmt.Println(ok)
	// Output:
	// payments-svc true
	// true false false
	// false
}
