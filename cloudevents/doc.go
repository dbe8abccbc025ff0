// Package cloudevents is outbox-relay's CloudEvents 1.0 wire format, shared by the relay,
// which encodes, and package inbox (or any consumer), which parses. It has no dependency on
// the rest of the module: an Event is a plain struct of the outbox row's fields.
//
// It sits at the top level beside package signature for the same reason: it is part of the
// public webhook contract, which consumers read with or without package inbox.
//
// # Attributes
//
//	CloudEvents      outbox row / pipeline             binary mode header
//	specversion      "1.0"                             ce-specversion
//	id               id                                ce-id
//	source           pipeline source (DefaultSource)   ce-source
//	type             event_type                        ce-type
//	subject          aggregate_type "/" aggregate_id   ce-subject
//	time             created_at, RFC 3339, UTC         ce-time
//	datacontenttype  "application/json"                Content-Type
//	aggregatetype    aggregate_type                    ce-aggregatetype
//	aggregateid      aggregate_id                      ce-aggregateid
//	sequence         X-Event-Sequence of the raw format ce-sequence
//	traceparent      W3C traceparent                   traceparent
//	tracestate       W3C tracestate                    tracestate
//	data             payload                           the body
//
// # Binary mode (one event per request)
//
// BinaryHeaders gives the headers; the body is the payload, as it is:
//
//	POST /webhook HTTP/1.1
//	Content-Type: application/json
//	Ce-Specversion: 1.0
//	Ce-Id: 0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70
//	Ce-Source: /outbox-relay/default
//	Ce-Type: order.created
//	Ce-Subject: order/42
//	Ce-Time: 2026-11-30T19:40:00.123456Z
//	Ce-Aggregatetype: order
//	Ce-Aggregateid: 42
//	Ce-Sequence: 0000000001538A30-00000003
//	Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//
//	{"order_id": 42}
//
// # Batch mode (several events per request)
//
// AppendBatch gives the body, with Content-Type: application/cloudevents-batch+json:
//
//	[{"specversion":"1.0","id":"0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70","source":"/outbox-relay/default",
//	  "type":"order.created","subject":"order/42","time":"2026-11-30T19:40:00.123456Z",
//	  "datacontenttype":"application/json","aggregatetype":"order","aggregateid":"42",
//	  "sequence":"0000000001538A30-00000003","data":{"order_id": 42}}, ...]
//
// (one line in the real body). Signatures, which are not this package's business, cover the
// exact body bytes in both modes. Under Standard Webhooks a batch's webhook-id is BatchID of
// its events' ids, the same on every retry of the batch.
//
// # Parsing
//
// IsBinary and IsBatch tell the modes apart from the headers; ParseBinary and ParseBatch read
// them back into Events. Parsing is strict about what this package writes (specversion,
// required attributes, RFC 3339 time, string extensions, JSON data) and ignores attributes
// it does not know. The CloudEvents Go SDK reads what this package writes; its tests check
// every attribute through the SDK.
package cloudevents
