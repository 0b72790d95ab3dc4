package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFailClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"state Fresh, max-order-eur=5000 allow-new-customers=true.",
		"state FailedClosed, serving data from defaults: max-order-eur=100 allow-new-customers=false.",
		"errors.Is(err, config.ErrStale) = true",
		"state Fresh, serving data from network again: max-order-eur=5000 allow-new-customers=true.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
