// Package configmetrics tests the metrics of config's Client through the
// OpenTelemetry SDK's manual reader.
package configmetrics
