package h2cserver_test

import (
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/holdfast-dev/holdfast/internal/h2cserver"
)

// Serve HTTP/1.1 and h2c on one listener; a client with prior knowledge
// speaks HTTP/2 to it, any other HTTP/1.1.
func Example() {
	srv := h2cserver.New(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	})})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	var h1, h2c http.Protocols
	h1.SetHTTP1(true)
	h2c.SetUnencryptedHTTP2(true)
	for _, p := range []*http.Protocols{&h1, &h2c} {
		tr := &http.Transport{Protocols: p}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		resp, err := c.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			fmt.Println(err)
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(string(b))
	}
	// Output:
	// HTTP/1.1
	// HTTP/2.0
}
