package relay

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// Delivery is a pipeline's delivery settings: the request format, batching, compression and
// how delivered rows are marked; the relay hands each to the part that uses it (the webhook,
// the publisher, the marker). The zero value is today's contract: raw format, one event per
// request, no compression, MarksDone.
type Delivery struct {
	// Format is raw or cloudevents (webhooks only). Empty: raw.
	Format webhook.Format
	// Source is the CloudEvents source attribute. Empty: "/outbox-relay/<pipeline>".
	Source string
	// Batch sends several events per request, always as a CloudEvents batch. The zero value
	// sends one event per request.
	Batch publisher.Batch
	// Compression of request bodies: none or gzip (webhooks only). Empty: none.
	Compression webhook.Compression
	// Marks is done or off. Empty: done.
	Marks publisher.MarksMode
}

// Validate fills the defaults and rejects unknown values with an error naming the choices.
func (d *Delivery) Validate() error {
	var err error
	if d.Format, err = webhook.ParseFormat(string(d.Format)); err != nil {
		return err
	}
	if d.Compression, err = webhook.ParseCompression(string(d.Compression)); err != nil {
		return err
	}
	if d.Marks, err = publisher.ParseMarksMode(string(d.Marks)); err != nil {
		return err
	}
	switch {
	case d.Batch.MaxEvents < 0:
		return fmt.Errorf("batch max events %d is negative: use 1 (no batching) or more", d.Batch.MaxEvents)
	case d.Batch.MaxBytes < 0:
		return fmt.Errorf("batch max bytes %d is negative: use 0 (1 MiB) or more", d.Batch.MaxBytes)
	}
	return nil
}
