// Package gate is a rollout's metric gates: PromQL instant queries,
// evaluated against Prometheus's HTTP API while a stage bakes, whose
// value must stay at or under a max (docs/ROLLOUTS.md, "Metric gates").
//
// A gate is written as a -gate flag,
//
//	-gate 'prometheus=http://prometheus:9090,query=sum(rate(app_errors_total[1m])),max=0.5,grace=30s'
//
// (Parse; AddFlags registers -gate and -gate-file on a flag.FlagSet), or,
// for a query with commas, in a -gate-file holding a JSON list of the
// same fields (ParseFile); the JSON form of Gate is also the control
// API's. Parsing is strict: an unknown or repeated field, a missing
// prometheus, query or max, a URL that is not http(s), a negative grace
// are errors wrapping ErrSpec.
//
// A Checker evaluates one gate; a Set, the gates of one rollout. The
// caller owns the timing: it calls Start once when the rollout starts,
// then Check at its own interval (DefaultInterval is a suggestion), each
// time with the time it judges at, and the Checker keeps only when its
// query began to fail:
//
//   - a value above max is a Breach;
//   - a query that fails (no answer, the timeout, an HTTP or Prometheus
//     error), returns no series, several series, or NaN is Failing; once
//     it has failed for the gate's grace or longer, without an answer in
//     between, it is a Breach;
//   - at Start, several series, a range vector, a query Prometheus
//     refuses or a Prometheus that does not answer refuse the rollout (an
//     error); no series or NaN do not (the metric may not exist yet).
//
// A Result carries the value in full (Value, HasValue), the series, the
// error and a Reason of at most MaxReason bytes for the audit. Its JSON
// form writes the value as Prometheus does, a string, so NaN and ±Inf
// survive a round trip.
//
// A controller that took a rollout over resumes a gate's grace from the
// recorded Result.FailingSince (Checker.Resume). Bound binds a Checker to
// a clock, in the shape of internal/rollout/controller's Gate seam
// (Check(ctx) (breach, detail, err)); FromJSON builds one from a spec's
// JSON.
//
// A Checker starts no goroutine; a Set's checks run concurrently within
// the call. Close releases idle HTTP connections and is idempotent. A
// server with many rollouts passes one shared client (WithHTTPClient).
package gate
