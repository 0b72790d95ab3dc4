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

func TestSchemaNack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		`api-v2 applied it: revision 2, strategy="weighted".`,
		`api-v1 rejected it and keeps its last good: revision 1, strategy="round-robin"`,
		"kind invalid_data, errors.Is(err, config.ErrRejected) = true.",
		"client_id=api-v1 acked_revision=1 nacked_revision=2 behind=true",
		`at "/strategy": value must be one of`,
		`api-v1 applies it: strategy="least-conn"`,
		"api-v1 acked_revision=3.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
