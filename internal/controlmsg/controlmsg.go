// Package controlmsg is the wire format of the operator's requests that reach the relays through
// the WAL, as transactional logical decoding messages at their place in commit order: a replay of
// parked aggregates, or of the rows a replay --since request selects. internal/control writes them
// (Emit), the stream reads them (cdc's decoder, with DecodeReplay): one format, in a leaf that
// both import, so that neither takes its type from the other.
package controlmsg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ReplayPrefix is the prefix of the message that requests a replay; its content is a Replay in
// JSON.
const ReplayPrefix = "outbox-relay.replay"

// Aggregate names an aggregate: the ordering key.
type Aggregate struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Replay is the content of a replay message.
type Replay struct {
	Aggregates []Aggregate `json:"aggregates"`
	// Pipeline names the pipeline whose parked aggregates are replayed; every slot carries every
	// message, and each pipeline obeys only its own. Empty (requests written before pipelines)
	// means the pipeline named "default".
	Pipeline string `json:"pipeline,omitempty"`
	// SinceRequest is the id of an outbox_replays row: re-send the rows it selects (replay
	// --since) for Pipeline.
	SinceRequest int64 `json:"since_request,omitempty"`
}

// Emitter runs a statement; pgx.Tx satisfies it.
type Emitter interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Emit writes r into the WAL in tx, as the transactional logical decoding message the stream
// decodes. It reaches the relays when tx commits, at its place among the transactions.
func (r Replay) Emit(ctx context.Context, tx Emitter) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::text)`, ReplayPrefix, string(body)); err != nil {
		return fmt.Errorf("write replay request: %w", err)
	}
	return nil
}

// DecodeReplay decodes a replay message's content; false when it does not parse or asks for
// nothing.
func DecodeReplay(content []byte) (Replay, bool) {
	var r Replay
	if err := json.Unmarshal(content, &r); err != nil || (len(r.Aggregates) == 0 && r.SinceRequest == 0) {
		return Replay{}, false
	}
	if len(r.Aggregates) == 0 {
		r.Aggregates = nil
	}
	return r, true
}
