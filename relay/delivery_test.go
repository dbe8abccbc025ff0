package publisher

import (
	"strings"
	"testing"
	"time"
)

// The zero Delivery is today's contract; unknown values are refused with the choices named.
func TestDeliveryValidate(t *testing.T) {
	var d Delivery
	if err := d.Validate(); err != nil || d.Format != FormatRaw || d.Compression != CompressionNone || d.Marks != MarksDone || d.Batch.Enabled() {
		t.Fatalf("zero Delivery: %+v, %v", d, err)
	}
	for _, c := range []struct {
		d    Delivery
		want string
	}{
		{Delivery{Format: "xml"}, "use raw or cloudevents"},
		{Delivery{Compression: "br"}, "use none or gzip"},
		{Delivery{Marks: "later"}, "use done or off"},
		{Delivery{Batch: Batch{MaxEvents: -1}}, "use 1 (no batching) or more"},
		{Delivery{Batch: Batch{Linger: -time.Millisecond}}, "use 0 (send at once) or more"},
	} {
		if err := c.d.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.d, err, c.want)
		}
	}
	d = Delivery{Format: "CloudEvents", Compression: "GZIP", Marks: "OFF"}
	if err := d.Validate(); err != nil || d.Format != FormatCloudEvents || d.Compression != CompressionGzip || d.Marks != MarksOff {
		t.Fatalf("case-insensitive values: %+v, %v", d, err)
	}
}
