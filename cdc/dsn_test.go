package cdc

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A connection string that does not parse is ErrBadDSN, from Setup and from the stream: not a
// missing privilege (the operator would chase grants), and not a lost connection the stream
// retries forever.
func TestBadDSNIsItsOwnPermanentError(t *testing.T) {
	const dsn = "postgres://relay@localhost:notaport/app"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err := Setup(ctx, dsn, "s", "p", SetupOptions{})
	if !errors.Is(err, ErrBadDSN) || errors.Is(err, ErrNoPrivilege) {
		t.Fatalf("Setup with an unparsable DSN: %v, want ErrBadDSN and not ErrNoPrivilege", err)
	}

	s := NewStream(Config{DSN: dsn, Slot: "s", Publication: "p"}, NewTracker(10, 1<<20))
	err = s.Run(ctx, make(chan *Tx), make(chan struct{}))
	if ctx.Err() != nil {
		t.Fatal("Stream.Run retried an unparsable DSN until the deadline instead of returning")
	}
	if !errors.Is(err, ErrBadDSN) || errors.Is(err, ErrNoPrivilege) {
		t.Fatalf("Stream.Run with an unparsable DSN: %v, want ErrBadDSN and not ErrNoPrivilege", err)
	}
}
