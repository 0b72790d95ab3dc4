package transport

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// The ack pipe hands a line over without waiting when nothing waits; a
// line behind another waits for the transport, and its ctx ends the
// pipe; a close lets the transport read what waits, then the end.
func TestAckPipe(t *testing.T) {
	p := newAckPipe()
	if err := p.write(context.Background(), []byte("one\n")); err != nil {
		t.Fatalf("first write: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.write(context.Background(), []byte("two\n")) }()
	buf := make([]byte, 64)
	var got []byte
	for len(got) < len("one\ntwo\n") {
		n, err := p.Read(buf)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "one\ntwo\n" {
		t.Fatalf("read %q", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second write: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second write still waits after the transport took it")
	}

	// Behind, with nobody reading: ctx ends the write, and the pipe.
	if err := p.write(context.Background(), []byte("three\n")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- p.write(ctx, []byte("four\n")) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a write behind another, ctx cancelled: %v", err)
	}
	if err := p.write(context.Background(), []byte("five\n")); !errors.Is(err, context.Canceled) {
		t.Fatalf("a write after the pipe ended: %v", err)
	}

	// Closed: what waits is read, then the error.
	q := newAckPipe()
	if err := q.write(context.Background(), []byte("last\n")); err != nil {
		t.Fatal(err)
	}
	q.closeWithError(io.EOF)
	n, err := q.Read(buf)
	if err != nil || string(buf[:n]) != "last\n" {
		t.Fatalf("read after close: %q, %v", buf[:n], err)
	}
	if _, err := q.Read(buf); err != io.EOF {
		t.Fatalf("read at the end: %v", err)
	}
	if err := q.write(context.Background(), []byte("x\n")); err != io.EOF {
		t.Fatalf("write after close: %v", err)
	}
}
