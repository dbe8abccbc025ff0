package publisher

import (
	"fmt"
	"strings"
)

// Format is the wire format of a webhook request.
type Format string

// Formats.
const (
	// FormatRaw is the default contract: the payload as the body, X-Event-* headers.
	FormatRaw Format = "raw"
	// FormatCloudEvents is CloudEvents 1.0 binary mode for one event per request (the payload
	// as the body, ce-* headers). Batches are CloudEvents batch mode in either format.
	FormatCloudEvents Format = "cloudevents"
)

// Compression is the Content-Encoding of request bodies.
type Compression string

// Compressions.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
)

// MarksMode is how delivered rows are recorded in outbox_events (README: Done-marks).
type MarksMode string

// Marks modes.
const (
	// MarksDone updates each delivered row: status 'done', processed_at, retries. The default.
	MarksDone MarksMode = "done"
	// MarksOff records nothing: delivered rows keep status 'pending'. The slot's position is
	// still the truth of what was delivered; status and the skip of already delivered events
	// after a crash lose their input, and prune takes the rows once every slot confirmed them
	// (see the README).
	MarksOff MarksMode = "off"
)

// Delivery is a pipeline's delivery settings: the request format, batching, compression and
// how delivered rows are marked. The zero value is today's contract: raw format, one event per
// request, no compression, MarksDone.
type Delivery struct {
	// Format is raw or cloudevents. Empty: raw.
	Format Format
	// Source is the CloudEvents source attribute. Empty: "/outbox-relay/<pipeline>".
	Source string
	// Batch sends several events per request, always as a CloudEvents batch. The zero value
	// sends one event per request.
	Batch Batch
	// Compression of request bodies: none or gzip. Empty: none.
	Compression Compression
	// Marks is done or off. Empty: done.
	Marks MarksMode
}

// Validate fills the defaults and rejects unknown values with an error naming the choices.
func (d *Delivery) Validate() error {
	d.Format = Format(strings.ToLower(string(d.Format)))
	d.Compression = Compression(strings.ToLower(string(d.Compression)))
	d.Marks = MarksMode(strings.ToLower(string(d.Marks)))
	if d.Format == "" {
		d.Format = FormatRaw
	}
	if d.Compression == "" {
		d.Compression = CompressionNone
	}
	if d.Marks == "" {
		d.Marks = MarksDone
	}
	switch {
	case d.Format != FormatRaw && d.Format != FormatCloudEvents:
		return fmt.Errorf("unknown format %q: use raw or cloudevents", d.Format)
	case d.Compression != CompressionNone && d.Compression != CompressionGzip:
		return fmt.Errorf("unknown compression %q: use none or gzip", d.Compression)
	case d.Marks != MarksDone && d.Marks != MarksOff:
		return fmt.Errorf("unknown marks mode %q: use done or off", d.Marks)
	case d.Batch.MaxEvents < 0:
		return fmt.Errorf("batch max events %d is negative: use 1 (no batching) or more", d.Batch.MaxEvents)
	case d.Batch.MaxBytes < 0:
		return fmt.Errorf("batch max bytes %d is negative: use 0 (1 MiB) or more", d.Batch.MaxBytes)
	case d.Batch.Linger < 0:
		return fmt.Errorf("batch linger %s is negative: use 0 (send at once) or more", d.Batch.Linger)
	}
	return nil
}
