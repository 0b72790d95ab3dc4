// Package proxytest holds the tests of the SDK and the relay behind the
// proxies users put in front of a config server: Go's
// httputil.ReverseProxy, nginx and HAProxy (started by the tests from
// Debian's packages), plaintext and TLS-terminating, and a forward
// (CONNECT) proxy. It has no API; see docs/PROXIES.md.
package proxytest
