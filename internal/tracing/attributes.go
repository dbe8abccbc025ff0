package tracing

// The attributes of the spans. What is about the event, the transaction or the relay is under
// outbox.; the HTTP status is OpenTelemetry's semantic convention.
const (
	// Both spans.
	KeyPipeline = "outbox.pipeline" // the pipeline's name (with its shard: orders_s0of4)

	// The decode span.
	KeyTxXid       = "outbox.tx.xid"
	KeyTxCommitLSN = "outbox.tx.commit_lsn" // as PostgreSQL writes an LSN: 0/1538A30
	KeyTxEndLSN    = "outbox.tx.end_lsn"    // what the slot confirms once the transaction is delivered
	KeyTxEvents    = "outbox.tx.events"     // the transaction's outbox rows
	KeyTxControls  = "outbox.tx.controls"   // its control records (replay requests, endpoint changes), when any
	KeyTxResent    = "outbox.tx.resent"     // true: committed before this streaming session began

	// The attempt span.
	KeyEndpoint      = "outbox.endpoint" // the endpoint's id, in a pipeline with endpoints
	KeyEventID       = "outbox.event.id"
	KeyEventType     = "outbox.event.type"
	KeyEventSequence = "outbox.event.sequence" // X-Event-Sequence
	KeyAggregateType = "outbox.aggregate.type"
	KeyAggregateID   = "outbox.aggregate.id"
	KeyTenant        = "outbox.tenant.id" // when the row has one
	KeyAttempt       = "outbox.attempt"   // 1 for the first attempt
	KeyBatchSize     = "outbox.batch.size"
	KeyResult        = "outbox.result"     // the result label of outbox_relay_delivery_attempts_total
	KeyDelivered     = "outbox.delivered"  // the destination accepted the event
	KeyLatency       = "outbox.latency_ms" // the attempt's duration, as the span's, in milliseconds
	KeyRetryAfter    = "outbox.retry_after_ms"
	KeyStatusCode    = "http.response.status_code" // when the destination answered over HTTP
)
