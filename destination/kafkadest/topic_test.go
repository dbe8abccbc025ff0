package kafkadest

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/envelope"
)

func TestTopicTemplate(t *testing.T) {
	tm, err := parseTemplate(DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tm.expand(&envelope.Message{AggregateType: "Order Line/ü"}), "outbox.event.Order_Line___"; got != want {
		t.Errorf("expand = %q, want %q", got, want)
	}
	if got, want := tm.expand(&envelope.Message{}), "outbox.event._"; got != want {
		t.Errorf("expand of an empty type = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "a b", "a/{event_type}", "x.{nope}", "x.{event_type"} {
		if _, err := parseTemplate(bad); err == nil || !strings.Contains(err.Error(), "placeholders are") {
			t.Errorf("template %q: err %v, want an error naming the placeholders", bad, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "kafka.brokers"},
		{Config{Brokers: "kafka://a:9092"}, "without a scheme"},
		{Config{Brokers: "a:1", Compression: "brotli"}, "zstd"},
		{Config{Brokers: "a:1", SASL: SASLConfig{Mechanism: "gssapi"}}, "scram-sha-256"},
		{Config{Brokers: "a:1", SASL: SASLConfig{Mechanism: "plain", User: "u"}}, "password"},
		{Config{Brokers: "a:1", TLS: TLSConfig{Key: "k"}}, "tls.cert"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one naming %q", c.cfg, err, c.want)
		}
	}
	if err := (Config{Brokers: "a:1, b:2", Compression: "zstd"}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
