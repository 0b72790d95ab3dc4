package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// What a query can come back with, besides a value. Each is wrapped with
// its detail: errors.Is(err, ErrNoSeries).
var (
	// ErrNoSeries: the query answered with an empty vector. Counted as a
	// failure: after the grace it is a breach.
	ErrNoSeries = errors.New("gate: the query returned no series")
	// ErrSeveralSeries: the query answered with more than one series,
	// which a gate cannot compare with one max (aggregate it, e.g. with
	// sum or max). At Start it refuses the rollout; later it is a failure.
	ErrSeveralSeries = errors.New("gate: the query returned several series")
	// ErrNaN: the query answered NaN (a ratio of two zero rates, say),
	// which is neither above nor under max: a failure.
	ErrNaN = errors.New("gate: the query returned NaN")
	// ErrResultType: the query answered a range vector (matrix) or a
	// string; a gate needs a scalar or an instant vector.
	ErrResultType = errors.New("gate: the query's result is neither a scalar nor an instant vector")
	// ErrBadResponse: the reply is not one of Prometheus's query API.
	ErrBadResponse = errors.New("gate: not a reply of Prometheus's query API")
)

// QueryError is a query that got no answer: Prometheus refused it or
// failed (its error status), or could not be reached in time.
//
// Its message never quotes a reply that is not Prometheus's API (an HTTP
// error page, whatever a URL that is not a Prometheus answers), and says
// the same of every reply that did not come (refused, reset, not HTTP,
// past the timeout): a gate's error, shown to whoever started the
// rollout, neither reads back another service's pages nor tells an open
// port from a closed one. Err keeps the transport's error, for a log.
type QueryError struct {
	// StatusCode is the HTTP status, 0 when there was no reply.
	StatusCode int
	// Type is Prometheus's errorType (bad_data, execution, timeout,
	// canceled, internal, unavailable…), "" without one.
	Type string
	// Message is Prometheus's error (at most maxMessage bytes), "" for a
	// reply that is not Prometheus's.
	Message string
	// Err is the transport's error when there was no reply (unreachable,
	// the timeout).
	Err error
}

func (e *QueryError) Error() string {
	switch {
	case e.StatusCode == 0:
		return "gate: no answer from Prometheus (unreachable, refused, not HTTP, or past the timeout)"
	case e.Type != "":
		return fmt.Sprintf("gate: Prometheus refused the query (%s, HTTP %d): %s", e.Type, e.StatusCode, e.Message)
	case e.Message != "":
		return fmt.Sprintf("gate: Prometheus answered HTTP %d: %s", e.StatusCode, e.Message)
	}
	return fmt.Sprintf("gate: HTTP %d, a reply that is not Prometheus's query API (not shown)", e.StatusCode)
}

func (e *QueryError) Unwrap() error { return e.Err }

// Limits of what is read from Prometheus.
const (
	// maxBody bounds the reply read: one series is a few hundred bytes.
	maxBody = 1 << 20
	// maxMessage bounds an error message or a series' labels kept.
	maxMessage = 512
	// maxListed is how many series an ErrSeveralSeries names.
	maxListed = 3
)

// sample is what an instant query answered: its value, and the labels of
// its series ("" for a scalar).
type sample struct {
	value  float64
	series string
}

// query runs g's query once, as an instant query at Prometheus's now.
func query(ctx context.Context, client *http.Client, g Gate, timeout time.Duration) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	q := url.Values{"query": {g.Query}}
	if timeout >= time.Millisecond {
		// Prometheus stops evaluating when the caller has given up.
		q.Set("timeout", strconv.FormatInt(timeout.Milliseconds(), 10)+"ms")
	}
	target := strings.TrimSuffix(g.Prometheus, "/") + "/api/v1/query?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return sample{}, &QueryError{Err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return sample{}, &QueryError{Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return sample{}, &QueryError{Err: err} // cut short: no reply
	}
	if len(body) > maxBody {
		return sample{}, fmt.Errorf("%w: the reply is over %d bytes", ErrBadResponse, maxBody)
	}
	return decodeResponse(resp.StatusCode, body)
}

// unwrapURLError drops *url.Error's "Get "http://…/api/v1/query?query=…""
// prefix: the query is in the reason already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("timed out: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}

// reply is the envelope of every reply of Prometheus's HTTP API.
type reply struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      *struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// vectorSample is one element of an instant vector.
type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  json.RawMessage   `json:"value"`
}

// decodeResponse reads a reply of GET /api/v1/query with its HTTP status:
// the one value, or why there is none.
func decodeResponse(status int, body []byte) (sample, error) {
	var r reply
	jsonErr := json.Unmarshal(body, &r)
	if jsonErr != nil || (r.Status != "success" && r.Status != "error") {
		// Not Prometheus's API: whatever it says is not shown.
		if status/100 != 2 {
			return sample{}, &QueryError{StatusCode: status}
		}
		return sample{}, fmt.Errorf("%w: HTTP %d, not Prometheus's JSON envelope (not shown)", ErrBadResponse, status)
	}
	if r.Status == "error" || status/100 != 2 {
		msg := r.Error
		if msg == "" {
			msg = "(no message)"
		}
		return sample{}, &QueryError{StatusCode: status, Type: clip(r.ErrorType), Message: clip(msg)}
	}
	if r.Data == nil {
		return sample{}, fmt.Errorf("%w: no data", ErrBadResponse)
	}
	switch r.Data.ResultType {
	case "scalar":
		v, err := decodePoint(r.Data.Result)
		if err != nil {
			return sample{}, err
		}
		return sample{value: v}, nil
	case "vector":
		var vec []vectorSample
		if err := json.Unmarshal(r.Data.Result, &vec); err != nil {
			return sample{}, fmt.Errorf("%w: the vector: %v", ErrBadResponse, err)
		}
		switch len(vec) {
		case 0:
			return sample{}, ErrNoSeries
		case 1:
			v, err := decodePoint(vec[0].Value)
			if err != nil {
				return sample{}, err
			}
			return sample{value: v, series: clip(seriesText(vec[0].Metric))}, nil
		}
		names := make([]string, 0, maxListed)
		for _, s := range vec[:min(len(vec), maxListed)] {
			names = append(names, clip(seriesText(s.Metric)))
		}
		more := ""
		if len(vec) > maxListed {
			more = ", …"
		}
		return sample{}, fmt.Errorf("%w: %d series (%s%s); aggregate them, e.g. with sum() or max()",
			ErrSeveralSeries, len(vec), strings.Join(names, ", "), more)
	case "matrix", "string":
		return sample{}, fmt.Errorf("%w: a %s", ErrResultType, r.Data.ResultType)
	}
	return sample{}, fmt.Errorf("%w: result type %q", ErrBadResponse, clip(r.Data.ResultType))
}

// decodePoint reads a point, [unix seconds, "value"]: the value, with
// Prometheus's spellings of NaN and the infinities.
func decodePoint(raw json.RawMessage) (float64, error) {
	var point []json.RawMessage
	if err := json.Unmarshal(raw, &point); err != nil || len(point) != 2 {
		return 0, fmt.Errorf("%w: a point is [time, \"value\"], got %s", ErrBadResponse, clip(string(raw)))
	}
	var text string
	if err := json.Unmarshal(point[1], &text); err != nil {
		return 0, fmt.Errorf("%w: a value is a string, got %s", ErrBadResponse, clip(string(point[1])))
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		var ne *strconv.NumError
		if !errors.As(err, &ne) || ne.Err != strconv.ErrRange {
			return 0, fmt.Errorf("%w: the value %q is not a number", ErrBadResponse, clip(text))
		}
		// Out of range: ParseFloat gave ±Inf (or ±0), which is what it is.
	}
	return v, nil
}

// seriesText writes a series' labels as PromQL does: name{label="value",…};
// "" for none (an aggregate over everything).
func seriesText(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "__name__" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(m["__name__"])
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// clip bounds s at maxMessage bytes, on a rune boundary, marked when cut.
func clip(s string) string { return clipTo(s, maxMessage) }

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
