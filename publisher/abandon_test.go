package publisher

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// abandonStore is a Store whose Abandoned answers from a list; its other methods are not called.
type abandonStore struct {
	Store
	answers []error
	calls   int
}

func (s *abandonStore) Abandoned(context.Context, *envelope.Message, int, string) error {
	s.calls++
	if len(s.answers) == 0 {
		return nil
	}
	err := s.answers[0]
	s.answers = s.answers[1:]
	return err
}

// An abandoned shadow event whose row is not visible yet (the stream can hand over a
// transaction a moment before its commit is visible) is recorded once it is, not dropped; any
// other error is returned at once, and a row that never shows gives up when the time is up.
func TestRecordAbandonedWaitsForTheRowToBeVisible(t *testing.T) {
	notVisible := fmt.Errorf("%w: updated 0 of 1", errNotVisible)
	m := &envelope.Message{ID: "e1"}
	s := &abandonStore{answers: []error{notVisible, notVisible, nil}}
	if err := recordAbandoned(context.Background(), s, m, 2, "HTTP 503"); err != nil || s.calls != 3 {
		t.Fatalf("err %v after %d calls, want nil after 3 (the row visible at the third)", err, s.calls)
	}
	other := errors.New("permission denied")
	s = &abandonStore{answers: []error{other}}
	if err := recordAbandoned(context.Background(), s, m, 2, "HTTP 503"); !errors.Is(err, other) || s.calls != 1 {
		t.Fatalf("err %v after %d calls, want the error at once", err, s.calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	s = &abandonStore{answers: []error{notVisible, notVisible, notVisible, notVisible, notVisible, notVisible, notVisible, notVisible}}
	if err := recordAbandoned(ctx, s, m, 2, "HTTP 503"); !errors.Is(err, errNotVisible) {
		t.Fatalf("err %v, want errNotVisible once the time is up", err)
	}
}
