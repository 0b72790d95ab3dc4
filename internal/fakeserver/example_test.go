package fakeserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/holdfast-dev/holdfast/internal/fakeserver"
	"github.com/holdfast-dev/holdfast/transport"
)

func Example() {
	srv, err := fakeserver.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	rev, _ := srv.Publish("payments.prod", map[string]any{"retry-timeout-ms": 50})
	fmt.Println("published revision", rev)

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL() + transport.PathSnapshot + "?ns=payments.prod")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var snap transport.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, snap.Revision, string(snap.Values))
	// Output:
	// published revision 1
	// 200 1 {"retry-timeout-ms":50}
}
