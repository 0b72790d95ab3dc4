// Package otelcheck holds the tests that need the OpenTelemetry SDK and
// the Prometheus exporter: of the instruments (internal/instrument), of the
// dashboard and alert rules against the exporter's real names, and of
// config's metrics. It is a module of its own so that an application
// depending on holdfast does not download the SDK, the exporter and
// client_golang: go mod tidy loads the tests of the packages it imports,
// but not of other modules.
//
//	cd internal/otelcheck && go vet ./... && go test -race ./...
package otelcheck
