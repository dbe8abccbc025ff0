// Package kafkadest is the old import path of destination/kafkadest, kept for one release.
//
// Deprecated: import github.com/outbox-relay/outbox-relay/destination/kafkadest.
package kafkadest

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/destination/kafkadest"
)

// The names of destination/kafkadest.
type (
	Config      = kafkadest.Config
	Destination = kafkadest.Destination
	SASLConfig  = kafkadest.SASLConfig
	TLSConfig   = kafkadest.TLSConfig
)

// The constants of destination/kafkadest.
const (
	DefaultRequestTimeout = kafkadest.DefaultRequestTimeout
	DefaultTopic          = kafkadest.DefaultTopic
	IDHeader              = kafkadest.IDHeader
)

// New is kafkadest.New with a zerolog logger, as before the move (the new New takes a
// *slog.Logger).
func New(ctx context.Context, cfg Config, log zerolog.Logger) (*Destination, error) {
	return kafkadest.New(ctx, cfg, slog.New(zerolog.NewSlogHandler(log)))
}
