// Package publisher is the delivery engine: it orders, batches, retries and parks outbox
// events on their way to a Destination, and carries out pauses and replays. What goes over
// the wire is a destination's business: destination/webhook (signed HTTP POSTs),
// destination/natsdest (NATS JetStream) and destination/kafkadest (Kafka) implement Destination,
// and so can a program's own. A destination receives an envelope.Message and nothing else.
//
// # Ordering
//
// Events are queued by key, (aggregate_type, aggregate_id), in the commit order in which the
// stream hands them over. Only the head of a key's queue is ever eligible, and it stays the head
// until it is delivered: the next event of the same aggregate waits, while other aggregates are
// delivered concurrently by up to MaxInFlight workers.
//
// # Retries
//
// Events go to a Destination, one attempt at a time (or one batch, for a BatchDestination);
// the Destination reports a Result. For a webhook, delivered means a 2xx answer. Anything else,
// a timeout or a network error schedules the same event again after an exponential, jittered
// delay from RetryMin up to RetryMax (or the destination's Result.RetryAfter, up to RetryMax). A
// waiting retry holds no worker: other keys proceed.
//
// # Acknowledgement
//
// Every delivered event is acknowledged to the cdc.Tracker, which decides what the slot may
// confirm, and queued for the status marker, which marks rows done in batches off the delivery
// path. The marks are advisory: the slot is the source of truth.
//
// # Pause, 410 Gone and replays
//
// Pause holds every queued head back without acknowledging it: nothing is sent, the buffer
// fills, the stream stops reading and the slot keeps its position; Resume sends what is held, in
// order. A pipeline's pause lives in outbox_pipeline_control (written and read by internal/control), which the relay polls.
// A 410 Gone answer (Result.Gone) pauses the publisher itself under GonePause, recorded through
// Config.RecordPause, and puts the event back at the head of its key, unacknowledged.
//
// A replay request arrives in the stream as a transactional logical message, at its place in
// commit order: a control record of its transaction (cdc.Control), beside its events, never
// among what a destination sees. For parked aggregates (the request internal/control writes)
// their failed and parked events are queued there. For a time range (RequestReplaySince) the
// publisher first waits until everything queued ahead is delivered and marked, then reads the
// rows page by page in their original order per aggregate (the X-Event-Sequence recorded at
// marking), queuing a page and waiting for it to
// settle before the next; it takes nothing from the stream meanwhile, so the replay goes out
// ahead of everything committed later. The request's transaction is not confirmed until the last
// page settles, and the progress is recorded per page (SinceStore), so a restart resumes.
//
// # Metrics and lifetime
//
// A Publisher and a Marker register their series on the prometheus.Registerer of their Config
// (nil: nowhere); each series has one writer. Run owns everything it starts: its workers, and
// the retry timers, which its scheduler stops when Run returns.
package publisher
