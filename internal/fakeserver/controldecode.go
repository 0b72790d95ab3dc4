package fakeserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/holdfast-dev/holdfast/internal/dataplane"
	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// maxControlBytes limits a control request's body (a publish's and a
// schema's: WithMaxPublishBytes).
const maxControlBytes = 64 << 10

// decodeJSON decodes exactly one JSON value from data into v. Strict
// decoding refuses unknown fields: control bodies are written by people,
// and a typo should not pass silently.
func decodeJSON(data []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: empty body", ErrInvalid)
		}
		return fmt.Errorf("%w: body: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body: unexpected data after the JSON value", ErrInvalid)
	}
	return nil
}

// publishBody is the body of POST /control/namespaces/{ns}/publish.
type publishBody struct {
	Puts       map[string]json.RawMessage `json:"puts"`
	Deletes    []string                   `json:"deletes"`
	Actor      string                     `json:"actor"`
	Reason     string                     `json:"reason"`
	IfRevision *int64                     `json:"if_revision"`
	// AbortRollout reverts the rollout running on the namespace, if any,
	// before the publish (without it, the publish is refused: 409).
	AbortRollout bool `json:"abort_rollout"`
}

// parsePublish decodes and checks a publish body for namespace ns. It
// returns compacted values, de-duplicated deletes and the options, or an
// error wrapping ErrInvalid.
func parsePublish(ns string, data []byte) (map[string]json.RawMessage, []string, PublishOptions, error) {
	var body publishBody
	if err := decodeJSON(data, &body, true); err != nil {
		return nil, nil, PublishOptions{}, err
	}
	opts := PublishOptions{Actor: body.Actor, Reason: body.Reason, IfRevision: body.IfRevision, AbortRollout: body.AbortRollout}
	if err := checkPublishOptions(opts); err != nil {
		return nil, nil, PublishOptions{}, err
	}
	puts, dels, err := checkPublish(ns, body.Puts, body.Deletes)
	return puts, dels, opts, err
}

// parseRollout decodes a rollout body (controller.Request, as holdfast
// server takes it) into a spec, its actor and its reason (StartRollout
// checks the rest). Durations may be Go durations or whole seconds.
func parseRollout(data []byte) (spec controller.Spec, actor, reason string, err error) {
	var body controller.Request
	if err := decodeJSON(data, &body, true); err != nil {
		return spec, "", "", err
	}
	for _, d := range []struct {
		name string
		v    *string
	}{{"bake", &body.Bake}, {"report_timeout", &body.ReportTimeout}, {"stage_timeout", &body.StageTimeout}} {
		if *d.v == "" {
			continue
		}
		v, err := parseDuration(*d.v)
		if err != nil {
			return spec, "", "", fmt.Errorf("%s: %w", d.name, err)
		}
		*d.v = v.String()
	}
	spec, err = controller.SpecOf(&body)
	if err != nil {
		return spec, "", "", rolloutError(err)
	}
	return spec, body.Actor, body.Reason, nil
}

// parseDuration accepts Go durations ("1.5s") and whole seconds ("30"),
// as the data plane does.
func parseDuration(s string) (time.Duration, error) { return dataplane.ParseDuration(s) }
