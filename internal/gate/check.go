package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultTimeout bounds one query (the request and Prometheus's
// evaluation), unless WithTimeout says otherwise.
const DefaultTimeout = 10 * time.Second

// DefaultInterval is a suggested time between two checks of a gate while
// a stage bakes: with a scrape interval of a few seconds, a breach is
// seen within about 2×5 s plus the scrape interval. The caller owns the
// timing; the package does not use it.
const DefaultInterval = 5 * time.Second

// MaxReason bounds a Result's Reason in bytes (the audit keeps it). The
// figures are never cut: when the reason would be longer, the query's
// text in it is.
const MaxReason = 4 << 10

// Status is a gate's verdict at one check.
type Status string

const (
	// Pass: the query answered a value at or under max.
	Pass Status = "pass"
	// Failing: the query failed (no answer, an error, no series, several
	// series, NaN) for less than the grace so far.
	Failing Status = "failing"
	// Breach: the value is above max, or the query has failed for the
	// grace or longer. The rollout reverts (or holds).
	Breach Status = "breach"
)

// Result is one check of one gate.
type Result struct {
	Gate   Gate
	Status Status
	// Value is the query's value, when it answered one (HasValue); ±Inf
	// are values (+Inf is above any max, -Inf under it), NaN is not.
	Value    float64
	HasValue bool
	// Series is the labels of the series that answered, name{label="v"}
	// ("" for a scalar or no answer).
	Series string
	// At is the check's time (its now).
	At time.Time
	// FailingSince is when the query began to fail without a break, zero
	// when it answered.
	FailingSince time.Time
	// Err is why the query failed, nil when it answered a value. After a
	// JSON round trip only its text is kept.
	Err error
	// Reason says in one line what the check found, figures in full: for
	// the rollout's record and the audit. At most MaxReason bytes.
	Reason string
}

// resultJSON is the JSON form of a Result: the value as text, so that NaN
// and ±Inf survive (as Prometheus writes them).
type resultJSON struct {
	Gate         Gate       `json:"gate"`
	Status       Status     `json:"status"`
	Value        *string    `json:"value,omitempty"`
	Series       string     `json:"series,omitempty"`
	At           time.Time  `json:"at"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
	Error        string     `json:"error,omitempty"`
	Reason       string     `json:"reason"`
}

// MarshalJSON writes r for the rollout's record: the value a string
// ("0.25", "+Inf", "NaN"), the error its text.
func (r Result) MarshalJSON() ([]byte, error) {
	w := resultJSON{Gate: r.Gate, Status: r.Status, Series: r.Series, At: r.At, Reason: r.Reason}
	if r.HasValue {
		v := formatValue(r.Value)
		w.Value = &v
	}
	if !r.FailingSince.IsZero() {
		w.FailingSince = &r.FailingSince
	}
	if r.Err != nil {
		w.Error = r.Err.Error()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote; Err becomes an error with
// the same text.
func (r *Result) UnmarshalJSON(data []byte) error {
	var w resultJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	out := Result{Gate: w.Gate, Status: w.Status, Series: w.Series, At: w.At, Reason: w.Reason}
	if w.Value != nil {
		v, err := strconv.ParseFloat(*w.Value, 64)
		if err != nil {
			return fmt.Errorf("gate: result value %q: %w", *w.Value, err)
		}
		out.Value, out.HasValue = v, true
	}
	if w.FailingSince != nil {
		out.FailingSince = *w.FailingSince
	}
	if w.Error != "" {
		out.Err = errors.New(w.Error)
	}
	*r = out
	return nil
}

// formatValue writes a value as Prometheus does: in full, +Inf, -Inf, NaN.
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return formatFloat(v)
}

// Option configures a Checker.
type Option interface{ apply(*options) }

type options struct {
	client  *http.Client
	timeout time.Duration
	allow   *Allow
	limited bool // WithAllow was given
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithHTTPClient queries Prometheus through c (its TLS settings, a
// proxy); the default is a client of the Checker's own, whose idle
// connections Close closes.
func WithHTTPClient(c *http.Client) Option {
	return optionFunc(func(o *options) { o.client = c })
}

// WithTimeout bounds each query (default DefaultTimeout); it is also sent
// to Prometheus as the query's timeout.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.timeout = d })
}

// WithAllow refuses a gate whose Prometheus is under none of a's
// prefixes (ErrNotAllowed, with ErrSpec), and a redirect to a URL outside
// them; a nil or empty a allows nothing. Without it every URL is allowed:
// what a command's own -gate flags need, not a server whose rollouts a
// namespace's token may start.
func WithAllow(a *Allow) Option {
	return optionFunc(func(o *options) { o.allow, o.limited = a, true })
}

// Checker evaluates one gate, check after check, and keeps the time its
// query began to fail. The caller drives it (Start once, then Check at
// its own interval) and gives it the time, so the controller owns the
// clock. It starts no goroutine; it is safe for concurrent use, though
// checks are meant to be made one at a time.
type Checker struct {
	gate    Gate
	client  *http.Client
	owned   bool // client is ours: Close closes its idle connections
	timeout time.Duration

	mu           sync.Mutex
	failingSince time.Time
	closed       bool
}

// NewChecker checks g and returns its Checker.
func NewChecker(g Gate, opts ...Option) (*Checker, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("gate: the timeout must be positive, got %v", o.timeout)
	}
	if o.limited {
		if err := o.allow.check(g); err != nil {
			return nil, err
		}
	}
	c := &Checker{gate: g, client: o.client, timeout: o.timeout}
	if c.client == nil {
		c.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		c.owned = true
	}
	if o.limited {
		c.client = allowRedirects(c.client, o.allow)
	}
	return c, nil
}

// Gate is the gate c checks.
func (c *Checker) Gate() Gate { return c.gate }

// ErrClosed: the Checker was closed.
var ErrClosed = errors.New("gate: the checker is closed")

// Start is the first check, when a rollout starts, and refuses what can
// never pass: a query that returns several series (ErrSeveralSeries), a
// range vector or a string (ErrResultType), one Prometheus refuses or
// that gets no answer (*QueryError, ErrBadResponse). A query that returns
// no series or NaN is accepted (the metric may not exist yet): its grace
// starts now. A value above max is returned as a Breach, not refused: the
// caller decides.
//
// The error names the gate and wraps the cause (errors.Is and errors.As
// see ErrSeveralSeries, *QueryError…); the Result is returned with it.
func (c *Checker) Start(ctx context.Context, now time.Time) (Result, error) {
	r, err := c.Check(ctx, now)
	if err != nil {
		return r, err
	}
	if r.Err != nil && !errors.Is(r.Err, ErrNoSeries) && !errors.Is(r.Err, ErrNaN) {
		c.mu.Lock()
		c.failingSince = time.Time{} // a refused start leaves no state
		c.mu.Unlock()
		return r, fmt.Errorf("gate %s: %w", c.gate, r.Err)
	}
	return r, nil
}

// Check runs the query once and judges it at now:
//
//   - a value above max is a Breach;
//   - a value at or under max (or -Inf) is a Pass, and ends a failure;
//   - no answer (unreachable, the timeout, an HTTP or Prometheus error),
//     no series, several series, NaN, or a reply that is not Prometheus's
//     is a failure: Failing while it has lasted less than the grace since
//     its first check, then a Breach.
//
// A breach does not latch: the next check judges afresh. The error is
// ctx's own (the caller gave up: nothing was judged and the state is
// unchanged) or ErrClosed.
func (c *Checker) Check(ctx context.Context, now time.Time) (Result, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return Result{}, ErrClosed
	}
	s, qerr := query(ctx, c.client, c.gate, c.timeout)
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	r := Result{Gate: c.gate, At: now, Series: s.series}
	if qerr == nil && math.IsNaN(s.value) {
		qerr = fmt.Errorf("%w (e.g. a ratio with no traffic: 0/0)", ErrNaN)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if qerr == nil {
		c.failingSince = time.Time{}
		r.Value, r.HasValue = s.value, true
		if s.value > c.gate.Max {
			r.Status = Breach
			r.Reason = c.reason(fmt.Sprintf("value %s above max %s", formatValue(s.value), formatFloat(c.gate.Max)), s.series)
		} else {
			r.Status = Pass
			r.Reason = c.reason(fmt.Sprintf("value %s at or under max %s", formatValue(s.value), formatFloat(c.gate.Max)), s.series)
		}
		return r, nil
	}
	if c.failingSince.IsZero() || now.Before(c.failingSince) {
		c.failingSince = now
	}
	r.Err, r.FailingSince = qerr, c.failingSince
	failed := now.Sub(c.failingSince)
	shown := failed.Round(time.Millisecond) // in the reason: no nanoseconds
	if failed >= c.gate.Grace {
		r.Status = Breach
		r.Reason = c.reason(fmt.Sprintf("failing for %v (grace %v): %v", shown, c.gate.Grace, qerr), "")
	} else {
		r.Status = Failing
		r.Reason = c.reason(fmt.Sprintf("failing for %v of grace %v: %v", shown, c.gate.Grace, qerr), "")
	}
	return r, nil
}

// FailingSince is when the query began to fail without a break (zero
// when its last check answered): what a controller stores to resume the
// gate elsewhere (Resume).
func (c *Checker) FailingSince() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failingSince
}

// Resume sets the time the query began to fail, as a Result's
// FailingSince recorded it, before the first check of a controller that
// took the rollout over, so that the grace goes on instead of starting
// again. The zero time: not failing.
func (c *Checker) Resume(failingSince time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failingSince = failingSince
}

// Close releases the idle connections of the Checker's own HTTP client.
// It is idempotent; a Check after it returns ErrClosed.
func (c *Checker) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed && c.owned {
		c.client.CloseIdleConnections()
	}
	c.closed = true
	return nil
}

// reason writes the line of a result: what was found, figures and series
// first, then the gate's Prometheus and query. Past MaxReason the end is
// cut, which is the query's text (the finding is at most a few error
// messages of maxMessage bytes): a caller that prefixes the reason and
// cuts it again cuts the query too, never the figures.
func (c *Checker) reason(finding, series string) string {
	s := finding
	if series != "" {
		s += " (series " + series + ")"
	}
	s += "; gate on " + c.gate.Prometheus + ", query " + strconv.Quote(c.gate.Query)
	return clipTo(s, MaxReason)
}
