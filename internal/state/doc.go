// Package state is the SQL of the relay's own state in PostgreSQL: the rows the relay writes
// about itself, apart from the outbox rows a producer writes (outbox) and the consumer's inbox
// (inbox). Its queries name the tables through internal/schema (schema.SQL placeholders), in
// the schema of the relay's tables, so a table of the same name elsewhere is never touched.
//
// # What is here
//
// One file per table, with the types its rows read into:
//
//   - location.go: where a slot lives and its move between the primary and a standby
//     (outbox_slot_location: ReadLocation, SetLocation, StartMove, MarkReached, FinishMove),
//     which cdc's placement and move read and write;
//   - slots.go: a slot's record (outbox_slots: RecordSlot when cdc creates it,
//     PublicationReplaced at every start, ForgetSlot when control drops it);
//   - backfill.go: a new slot's backfill list (outbox_backfill: HoldBackfill before the slot
//     exists, RecordBackfill in its snapshot, CopyBackfill from a standby, the backfill order),
//     the pages the engine delivers it in (BackfillPage, BackfillDone), and the condition a
//     reshard's fence waits on (BackfillOutstanding, which internal/control puts in its
//     statements);
//   - marks.go: the status marks, the relay's columns of outbox_events (MarkDone, MarkedDone for
//     pgstore.Marker; MarkFailed, MarkParked for the pipeline that owns the rows' status);
//   - parked.go: parked aggregates (outbox_parked_aggregates: ParkedAggregates, Park, Unpark,
//     Replayable for the engine; ParkedPipelines, SelectParked, ParkedReason, ParkedEvents for
//     internal/control's replay request);
//   - pipeline_events.go: a pipeline's own state of the events it could not deliver
//     (outbox_pipeline_events: RecordPipelineEvent, ParkPipelineEvents, ForgetReplayed);
//   - replays.go: replay --since requests (outbox_replays: CountReplay, RecordReplay for
//     publisher.RequestReplaySince; ReadReplay, ReplayPage, RecordReplayProgress for the engine),
//     with the replay order and its row filter, which the page reads and the count share;
//   - endpoints.go: the endpoints' state of a pipeline run with endpoints
//     (outbox_endpoint_versions: RecordEndpointVersion, EndpointVersions,
//     BootstrapEndpointVersions in a new slot's snapshot, PruneEndpointVersions;
//     outbox_endpoint_status: SaveEndpointStatus, EndpointStatuses, ForgetEndpointStatus;
//     ForgetEndpointPipeline when control drops the pipeline);
//   - endpoint_report.go: what `outbox-relay status --endpoints` and `replay --endpoint` read
//     beside EndpointStatuses, one query per table whatever the number of endpoints:
//     EndpointStates (each endpoint's state in outbox_endpoints), EndpointPipelines (the
//     pipelines that run with endpoints), BacklogPerLane (the events in each endpoint's
//     outbox_endpoint_backlog); ParkedPerLane, in parked.go, counts each endpoint lane's parked
//     aggregates;
//   - endpoint_remove.go: what `outbox-relay endpoint remove` drops with an endpoint, over every
//     pipeline (CountEndpointHolds, DropEndpointHolds: its backlog, its lanes' dead letters and
//     parked aggregates);
//   - event.go: the rows a replay or a backfill re-sends (Event, Aggregate, with the tenant).
//   - deliverylog_page.go and endpoint_stats.go: what the management API reads of the delivery
//     log and the endpoints' status (EndpointLogPage, a keyset page newest first through the
//     log's (pipeline, endpoint_id, time) indexes; ReadEndpointStats);
//   - api_audit.go and api_idempotency.go: the API's own tables (outbox_api_audit: InsertAudit,
//     ListAudit; outbox_api_idempotency: ClaimIdempotencyKey, RecordIdempotentAnswer).
//
// The engine depends on package store's interfaces, so a program can plug its own store;
// store/pgstore, the implementation on these tables, only turns these rows
// into envelopes. internal/schema's source check refuses a query of these tables, or an UPDATE
// of outbox_events (the marks), outside this package.
//
// # What belongs here
//
// Every statement on a table the relay keeps for itself: a new state table's SQL (for example
// the fan-out engine's per-endpoint delivery state) goes in a file of its own here, named for
// the table, with the types its rows read into; the package that uses it (cdc, publisher,
// relay, control) calls it through a small interface or these concrete functions, and
// internal/schema's check gets the table in its owners.
//
// # What is elsewhere, and why
//
// The operator requests' own rows, outbox_reshard and outbox_pipeline_control, are
// internal/control's: there a request's protocol and its row are one unit (RecordFence records
// the fence as reached in the one statement that checks it, so the record is true when
// written), and a change to a request (a step, a column) lands in that one file. A request that
// reads this package's tables (the replay's parked aggregates, the fence's backfill) calls
// these functions. outbox_events is the producer's table: outbox writes and prunes it, cdc
// reads the pending count, and only its status marks are here. The status report
// (internal/inspect) reads everything, and stays a reader; the migrations create the tables.
package state
