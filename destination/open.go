package destination

import (
	"context"
	"log/slog"
	"time"
)

// Opener is a pipeline's destination before it runs: relay.Pipeline.Destination holds one, and
// the relay opens it when the pipeline starts (each shard opens its own). natsdest.Config and
// kafkadest.Config are Openers; Opened makes one of a Destination a program built itself.
//
// If the Opener has a method Validate() error, the relay calls it before anything starts, so
// that a bad setting is refused up front. If the Destination that Open returns has a method
// Close(), the relay calls it once the pipeline has drained (see Open).
type Opener interface {
	// Open connects the destination and returns it ready to send. A destination not reachable
	// yet is waited for until ctx ends (the pipeline reports it on /readyz meanwhile); an error
	// is permanent and stops the relay, so it should name the fix.
	Open(ctx context.Context, o OpenOptions) (Destination, error)
}

// OpenOptions is what the relay tells a destination it opens.
type OpenOptions struct {
	// Pipeline is the name of the pipeline (with its shard, "orders" or "orders_s0of4").
	Pipeline string
	// RequestTimeout is the pipeline's request timeout, for a destination whose own is unset.
	// Zero: the destination's default.
	RequestTimeout time.Duration
	// Logger carries the pipeline's name (and shard) on every line. Nil: slog.Default().
	Logger *slog.Logger
}

// Log returns o.Logger, or slog.Default() when it is nil.
func (o OpenOptions) Log() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// Opened returns an Opener whose Open returns d as it is: for a destination a program built
// and connected itself, and closes itself once the relay has returned (the relay never closes
// it). Sharded, every shard sends through the same d.
func Opened(d Destination) Opener { return opened{d} }

type opened struct{ d Destination }

func (o opened) Open(context.Context, OpenOptions) (Destination, error) { return o.d, nil }

// Open opens o and returns the destination with what releases it: its Close() if it has one
// (and did not come from Opened), else nothing.
func Open(ctx context.Context, o Opener, opts OpenOptions) (d Destination, release func(), err error) {
	if d, err = o.Open(ctx, opts); err != nil {
		return nil, nil, err
	}
	if c, ok := d.(interface{ Close() }); ok {
		if _, given := o.(opened); !given {
			return d, c.Close, nil
		}
	}
	return d, func() {}, nil
}
