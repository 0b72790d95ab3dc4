// Package httpmetrics measures the requests an HTTP handler serves, as
// operators of kube-apiserver and etcd expect: a latency histogram by
// route, method and status code. The route is the pattern of the
// http.ServeMux that served the request, never the raw path, so that the
// series stay bounded whatever paths clients ask for.
package httpmetrics

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Unmatched is the route of a request no mux pattern served (refused
// before routing, e.g. a closed server's 503).
const Unmatched = "unmatched"

// buckets are the latency histogram's bounds, in seconds: kube-apiserver's
// request buckets. A stream's duration is the stream's life; the
// dashboard leaves the stream routes out of its latency panels.
var buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60}

// knownMethods are the methods kept as they are; another is "other".
var knownMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true}

// Wrap returns next measured into meter's histogram name (e.g.
// "holdfast.server.request.duration", in seconds) with the attributes
// route (the mux pattern without its method, or Unmatched), method and
// code (the reply's status code). The mux must
// see the *http.Request Wrap passes on, or a handler between that passes
// a copy (r.WithContext) must copy the mux's Pattern back.
func Wrap(meter metric.Meter, name string, next http.Handler) (http.Handler, error) {
	hist, err := meter.Float64Histogram(name, metric.WithUnit("s"),
		metric.WithDescription("How long the server took to serve a request (a stream: its life), by route, method and status code."),
		metric.WithExplicitBucketBoundaries(buckets...))
	if err != nil {
		return nil, fmt.Errorf("httpmetrics: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		rw := &recorder{ResponseWriter: w}
		defer func() {
			route := Unmatched
			if r.Pattern != "" {
				route = r.Pattern
				if _, path, ok := strings.Cut(route, " "); ok {
					route = path
				}
			}
			method := r.Method
			if !knownMethods[method] {
				method = "other"
			}
			code := rw.code
			if code == 0 {
				code = http.StatusOK // what net/http sends for a handler that wrote nothing
			}
			hist.Record(r.Context(), time.Since(started).Seconds(), metric.WithAttributes(
				attribute.String("route", route), attribute.String("method", method), attribute.String("code", strconv.Itoa(code))))
		}()
		next.ServeHTTP(rw, r)
	}), nil
}

// recorder keeps the status code written through it.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush flushes the reply (streams need it).
func (r *recorder) Flush() {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands the connection over, when the writer can.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := r.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("httpmetrics: the response writer cannot hijack")
}

// Unwrap is for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
