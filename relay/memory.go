package relay

// Memory: what the relay holds grows with its pipelines. Each pipeline (and each shard) buffers
// up to its MaxBufferedBytes of events received and not yet delivered (a transaction enters
// whole, so one larger than the bound overshoots it), and the heap holds about 1.2 bytes per
// buffered byte (measured: 130 MiB buffered over 4 pipelines, 155 MB live after a GC). A soft
// memory limit below that live heap makes the GC run back to back without freeing anything:
// 24 cycles a second at 64 MiB in the same measurement (docs/operations/starting.md, Memory).

// Bounds of SoftMemoryLimit.
const (
	// MemoryBase is what a relay needs besides its buffers: code, pools, the HTTP clients, the
	// metrics.
	MemoryBase = 32 << 20
	// MemoryPerBufferedByte is the limit's allowance per byte of MaxBufferedBytes: the live
	// heap per buffered byte, with room for the GC to collect at a calm pace.
	MemoryPerBufferedByte = 2
	// MemoryPerEndpoint is the limit's allowance per partner endpoint of each pipeline (and
	// shard) with endpoints: what its lane and its webhook client hold live, with a kept-alive
	// https connection. Measured at 10,000 endpoints: about 3.5 KB each (the lane's queues and
	// maps, its client and signer; a connection's read and write buffers are lent per request,
	// not kept per endpoint), and a TLS connection about 7 KB more (crypto/tls keeps its record
	// and handshake buffers and cipher state while the connection idles). Below what they hold
	// the GC runs back to back: 10,000 endpoints once held about 118 MB live under a 96 MiB
	// limit, and the GC took half of the relay's CPU.
	MemoryPerEndpoint = 12 << 10
)

// BufferedBytesBound returns the sum of MaxBufferedBytes (defaults applied) over the pipelines
// Run would run for cfg, shards counted one by one: what the process may hold in buffers. An
// invalid pipeline list is an error, as Run would return it.
func BufferedBytesBound(cfg Config) (int64, error) {
	cfg.defaults()
	pipes, err := cfg.pipelines()
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, p := range pipes {
		sum += int64(p.MaxBufferedBytes)
	}
	return sum, nil
}

// SoftMemoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit) `outbox-relay run`
// sets unless GOMEMLIMIT is set, for a relay with no partner endpoint: MemoryBase plus
// MemoryPerBufferedByte times BufferedBytesBound, so that the limit stays above the live heap
// however full the buffers are (96 MiB for one pipeline at the default 32 MiB; 288 MiB for
// four). SoftMemoryLimitFor adds the endpoints'.
func SoftMemoryLimit(cfg Config) (int64, error) {
	return SoftMemoryLimitFor(cfg, 0)
}

// SoftMemoryLimitFor is SoftMemoryLimit with endpoints partner endpoints (outbox_endpoints'
// rows): MemoryPerEndpoint each, for every pipeline (and shard) with endpoints, since each holds
// a lane and a client per endpoint (10,000 endpoints on one pipeline: 213 MiB).
func SoftMemoryLimitFor(cfg Config, endpoints int) (int64, error) {
	cfg.defaults()
	pipes, err := cfg.pipelines()
	if err != nil {
		return 0, err
	}
	var buffered, lanes int64
	for _, p := range pipes {
		buffered += int64(p.MaxBufferedBytes)
		if p.Endpoints {
			lanes += int64(max(endpoints, 0))
		}
	}
	return MemoryBase + MemoryPerBufferedByte*buffered + MemoryPerEndpoint*lanes, nil
}

// HasEndpoints reports whether a pipeline Run would run for cfg delivers to partner endpoints.
func HasEndpoints(cfg Config) bool {
	cfg.defaults()
	pipes, err := cfg.pipelines()
	if err != nil {
		return false
	}
	for _, p := range pipes {
		if p.Endpoints {
			return true
		}
	}
	return false
}
