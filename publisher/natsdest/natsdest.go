// Package natsdest is the old import path of destination/natsdest, kept for one release.
//
// Deprecated: import github.com/outbox-relay/outbox-relay/destination/natsdest.
package natsdest

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/destination/natsdest"
)

// The names of destination/natsdest.
type (
	Config       = natsdest.Config
	Destination  = natsdest.Destination
	StreamConfig = natsdest.StreamConfig
	TLSConfig    = natsdest.TLSConfig
)

// The constants of destination/natsdest.
const (
	DefaultRequestTimeout = natsdest.DefaultRequestTimeout
	DefaultSubject        = natsdest.DefaultSubject
	MsgIDHeader           = natsdest.MsgIDHeader
)

// ErrNoStream is natsdest.ErrNoStream.
var ErrNoStream = natsdest.ErrNoStream

// New is natsdest.New with a zerolog logger, as before the move (the new New takes a
// *slog.Logger).
func New(ctx context.Context, cfg Config, log zerolog.Logger) (*Destination, error) {
	return natsdest.New(ctx, cfg, slog.New(zerolog.NewSlogHandler(log)))
}
