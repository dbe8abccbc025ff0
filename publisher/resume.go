package publisher

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// Resume skips, after a restart, events that an earlier process delivered but could not confirm
// before it died: the server resends everything after the slot's confirmed position, and the
// status marks say which of those rows already got a 2xx. It only looks at transactions that
// committed before this process started, and stops looking at the first batch with nothing
// marked. It reduces duplicates; correctness never depends on it (marks are written only after
// delivery, so a marked row was delivered).
type Resume struct {
	// Since is the server's clock when this process started; later commits are never checked.
	Since time.Time
	// Delivered returns which of ids are marked delivered.
	Delivered func(ctx context.Context, ids []string) (map[string]bool, error)
	// Batch is the most events checked per query. If zero, 1000.
	Batch int

	done bool
}

// active reports whether tx may hold events delivered by an earlier process.
func (r *Resume) active(tx *cdc.Tx) bool {
	return r != nil && !r.done && r.Delivered != nil && tx.CommitTime.Before(r.Since)
}

// filter returns, for a batch of transactions, the events already delivered.
func (r *Resume) filter(ctx context.Context, txs []*cdc.Tx) map[string]bool {
	var ids []string
	for _, tx := range txs {
		for _, ev := range tx.Events {
			ids = append(ids, ev.ID)
		}
	}
	seen, err := r.Delivered(ctx, ids)
	if err != nil {
		return nil // deliver them again: duplicates are allowed, loss is not
	}
	if len(seen) == 0 {
		r.done = true
	}
	return seen
}

// batch collects transactions that need checking: first, then whatever else is waiting in in
// right now, up to the batch size. A transaction that needs no check ends the batch and is
// returned separately.
func (r *Resume) batch(first *cdc.Tx, in <-chan *cdc.Tx) (check []*cdc.Tx, rest *cdc.Tx) {
	limit := r.Batch
	if limit <= 0 {
		limit = 1000
	}
	check = []*cdc.Tx{first}
	n := len(first.Events)
	for n < limit {
		select {
		case tx := <-in:
			if !r.active(tx) {
				return check, tx
			}
			check = append(check, tx)
			n += len(tx.Events)
		default:
			return check, nil
		}
	}
	return check, nil
}
