package publisher

import (
	"context"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// Resume skips events that another session delivered but had not confirmed when it ended: a
// killed relay, the leader before a failover, or this process before the server's crash restart
// moved the slot back. The server resends everything after the slot's confirmed position, and
// the status marks say which of those rows already got a 2xx. Only transactions committed
// before their streaming session started (cdc.Tx.Resent) are checked, and each session stops
// checking at its first batch with nothing marked. It reduces duplicates; correctness never
// depends on it (marks are written only after delivery, so a marked row was delivered).
type Resume struct {
	// Delivered returns which of ids are marked delivered.
	Delivered func(ctx context.Context, ids []string) (map[string]bool, error)
	// Batch is the most events checked per query. If zero, 1000.
	Batch int

	doneSession uint64 // the session that found nothing more to skip
}

// take hands tx to queue; after a restart it first checks it, with whatever else waits in in,
// for events an earlier process delivered, which queue is told (delivered) to skip. r may be nil.
func (r *Resume) take(ctx context.Context, tx *cdc.Tx, in <-chan *cdc.Tx,
	queue func(ctx context.Context, tx *cdc.Tx, delivered map[string]bool)) {
	if !r.active(tx) {
		queue(ctx, tx, nil)
		return
	}
	check, rest := r.batch(tx, in)
	seen := r.filter(ctx, check)
	for _, t := range check {
		queue(ctx, t, seen)
	}
	if rest != nil {
		queue(ctx, rest, nil)
	}
}

// active reports whether tx may hold events delivered by an earlier process.
func (r *Resume) active(tx *cdc.Tx) bool {
	return r != nil && r.Delivered != nil && tx.Resent && tx.Session != r.doneSession
}

// filter returns, for a batch of transactions, the events already delivered.
func (r *Resume) filter(ctx context.Context, txs []*cdc.Tx) map[string]bool {
	var ids []string
	for _, tx := range txs {
		for _, m := range tx.Events {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		// Only control records (replay requests): they say nothing about whether later
		// transactions were delivered, so the checks go on.
		return nil
	}
	seen, err := r.Delivered(ctx, ids)
	if err != nil {
		return nil // deliver them again: duplicates are allowed, loss is not
	}
	if len(seen) == 0 {
		r.doneSession = txs[len(txs)-1].Session
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
