package natsdest

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/envelope"
)

func TestSubjectTemplate(t *testing.T) {
	tm, err := parseTemplate(DefaultSubject)
	if err != nil {
		t.Fatal(err)
	}
	ev := &envelope.Message{AggregateType: "order.line", AggregateID: "a b", EventType: "created>*\n"}
	if got, want := tm.expand(ev), "outbox.order_line.created___"; got != want {
		t.Errorf("expand = %q, want %q", got, want)
	}
	if got, want := tm.wildcard(), "outbox.*.*"; got != want {
		t.Errorf("wildcard = %q, want %q", got, want)
	}
	tm, _ = parseTemplate("events.{aggregate_type}-{aggregate_id}.x")
	if got, want := tm.expand(&envelope.Message{AggregateType: "", AggregateID: "7"}), "events._-7.x"; got != want {
		t.Errorf("expand = %q, want %q", got, want)
	}
	if got, want := tm.wildcard(), "events.*.x"; got != want {
		t.Errorf("wildcard = %q, want %q", got, want)
	}
	for _, bad := range []string{"a..b", ".a", "a.", "a.*", "a.>", "a b", "a.{nope}", "a.{event_type", "a}.b"} {
		if _, err := parseTemplate(bad); err == nil || !strings.Contains(err.Error(), "placeholders are") {
			t.Errorf("template %q: err %v, want an error naming the placeholders", bad, err)
		}
	}
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		f, sub string
		want   bool
	}{{"outbox.>", "outbox.*.*", true}, {"outbox.*.*", "outbox.*.*", true}, {"outbox.order.*", "outbox.*.*", false},
		{"outbox.*", "outbox.*.*", false}, {">", "a", true}, {"a.b", "a.b", true}, {"a.*", "a.b", true}, {"a.b.>", "a.b", false}} {
		if got := covers(c.f, c.sub); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.f, c.sub, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "nats.url"},
		{Config{URL: "nats://a:1,,nats://b:1"}, "single commas"},
		{Config{URL: "http://a:1"}, "nats://"},
		{Config{URL: "nats://a:1", TLS: TLSConfig{Cert: "c"}}, "tls.key"},
		{Config{URL: "nats://a:1", CreateStream: &StreamConfig{}}, "create_stream.name"},
		{Config{URL: "nats://a:1", CreateStream: &StreamConfig{Name: "S", Replicas: 7}}, "1 to 5"},
		{Config{URL: "nats://a:1", Subject: "x.{bad}"}, "unknown placeholder"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one naming %q", c.cfg, err, c.want)
		}
	}
	if err := (Config{URL: "nats://u:secret@a:1,b:2"}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
