package config_test

import (
	"crypto/tls"
	"crypto/x509"
	"log"
	"os"

	"github.com/holdfast-dev/holdfast/config"
)

// A client of a config plane over https whose certificate a private CA
// issued, presenting a client certificate of its own (mutual TLS: the
// server takes its subject as the client's identity). The stream,
// snapshots and acks share one HTTP/2 connection.
func ExampleWithTLSConfig() {
	caPEM, err := os.ReadFile("/etc/holdfast/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair("/etc/holdfast/client.pem", "/etc/holdfast/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	c, err := config.New(
		config.WithEndpoint("https://relay.internal:8081"),
		config.WithTLSConfig(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}
