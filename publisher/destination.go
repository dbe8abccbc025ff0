package publisher

import "github.com/outbox-relay/outbox-relay/destination"

// The destination contract lives in package destination, a leaf that a destination imports
// alone; these names keep the old import path working for one release.
type (
	// Destination is destination.Destination.
	//
	// Deprecated: use destination.Destination.
	Destination = destination.Destination
	// BatchDestination is destination.BatchDestination.
	//
	// Deprecated: use destination.BatchDestination.
	BatchDestination = destination.BatchDestination
	// PartialBatchDestination is destination.PartialBatchDestination.
	//
	// Deprecated: use destination.PartialBatchDestination.
	PartialBatchDestination = destination.PartialBatchDestination
	// Result is destination.Result.
	//
	// Deprecated: use destination.Result.
	Result = destination.Result
	// Opener is destination.Opener.
	//
	// Deprecated: use destination.Opener.
	Opener = destination.Opener
	// OpenOptions is destination.OpenOptions.
	//
	// Deprecated: use destination.OpenOptions.
	OpenOptions = destination.OpenOptions
)

// The Result labels, as in package destination.
//
// Deprecated: use the destination.Result* constants.
const (
	ResultSuccess  = destination.ResultSuccess
	Result3xx      = destination.Result3xx
	Result4xx      = destination.Result4xx
	Result5xx      = destination.Result5xx
	ResultTimeout  = destination.ResultTimeout
	ResultNetwork  = destination.ResultNetwork
	ResultRejected = destination.ResultRejected
	ResultProxy    = destination.ResultProxy
)

// Opened is destination.Opened.
//
// Deprecated: use destination.Opened.
func Opened(d Destination) Opener { return destination.Opened(d) }
