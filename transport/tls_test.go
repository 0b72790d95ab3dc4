package transport_test

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/holdfast-dev/holdfast/transport"
)

// TestWithTLSConfigExcludesHTTPClient: the TLS configuration goes in the
// source's own client; with a client of the caller's it belongs in that
// client's Transport.
func TestWithTLSConfigExcludesHTTPClient(t *testing.T) {
	if _, err := transport.NewHTTPSource("https://example.test", transport.WithHTTPClient(&http.Client{}),
		transport.WithTLSConfig(&tls.Config{})); err == nil {
		t.Error("WithTLSConfig with WithHTTPClient: no error")
	}
	s, err := transport.NewHTTPSource("https://example.test", transport.WithTLSConfig(nil))
	if err != nil {
		t.Fatalf("WithTLSConfig(nil): %v", err)
	}
	_ = s.Close()
}
