package relay

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// The zero Delivery is today's contract; unknown values are refused with the choices named.
func TestDeliveryValidate(t *testing.T) {
	t.Parallel()
	var d Delivery
	if err := d.Validate(); err != nil || d.Format != webhook.FormatRaw || d.Compression != webhook.CompressionNone || d.Marks != publisher.MarksDone || d.Batch.Enabled() {
		t.Fatalf("zero Delivery: %+v, %v", d, err)
	}
	for _, c := range []struct {
		d    Delivery
		want string
	}{
		{Delivery{Format: "xml"}, "use raw or cloudevents"},
		{Delivery{Compression: "br"}, "use none or gzip"},
		{Delivery{Marks: "later"}, "use done or off"},
		{Delivery{Batch: publisher.Batch{MaxEvents: -1}}, "use 1 (no batching) or more"},
	} {
		if err := c.d.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.d, err, c.want)
		}
	}
	if d := (Delivery{Batch: publisher.Batch{MaxEvents: 10, Linger: publisher.NoLinger}}); d.Validate() != nil {
		t.Fatalf("NoLinger (--batch-linger 0) refused: %v", d.Validate())
	}
	d = Delivery{Format: "CloudEvents", Compression: "GZIP", Marks: "OFF"}
	if err := d.Validate(); err != nil || d.Format != webhook.FormatCloudEvents || d.Compression != webhook.CompressionGzip || d.Marks != publisher.MarksOff {
		t.Fatalf("case-insensitive values: %+v, %v", d, err)
	}
}
