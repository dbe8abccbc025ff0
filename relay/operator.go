package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/signature"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// The operator's webhook (Config.OperatorWebhookURL): the endpoints' operational events,
// endpoint.disabled and endpoint.recovered, each POSTed as JSON signed with the X-Signature
// scheme the relay signs its webhooks with. The lanes hand events to a bounded queue and never
// wait; one goroutine, run by the relay and waited for, delivers them in order with a few
// retries. An event that finds the queue full, or fails every retry, is logged and dropped: the
// log line and outbox_relay_endpoint_transitions_total say the same.

const (
	operatorQueue    = 256              // events waiting to be sent
	operatorAttempts = 5                // attempts per event
	operatorTimeout  = 10 * time.Second // per attempt
	operatorDrain    = 5 * time.Second  // what a stopping relay gives the events left
)

// operatorHook delivers the operational events.
type operatorHook struct {
	url    string
	signer *signature.Signer
	client *http.Client
	queue  chan []byte
	log    zerolog.Logger
	ua     string
	retry  time.Duration // the first retry's delay, doubling
}

// validateEgress checks the egress proxy.
func (c *Config) validateEgress() error {
	if c.EgressProxy == "" {
		return nil
	}
	if _, err := endpoint.ParseProxy(c.EgressProxy); err != nil {
		return fmt.Errorf("%w: the egress proxy (--egress-proxy, OUTBOX_RELAY_EGRESS_PROXY): %w: give http://host:port "+
			"or https://user:password@host:port", ErrConfig, err)
	}
	return nil
}

// validateOperator checks the operator's webhook settings.
func (c *Config) validateOperator() error {
	if c.OperatorWebhookURL == "" {
		if c.OperatorWebhookSecret != "" {
			return fmt.Errorf("%w: an operator webhook secret without its URL: set --operator-webhook-url "+
				"(OUTBOX_RELAY_OPERATOR_WEBHOOK_URL), or drop the secret", ErrConfig)
		}
		return nil
	}
	u, err := url.Parse(c.OperatorWebhookURL)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: the operator webhook URL must be an absolute http(s) URL (--operator-webhook-url)", ErrConfig)
	}
	if len(signature.SplitSecrets(c.OperatorWebhookSecret)) == 0 {
		return fmt.Errorf("%w: the operator webhook needs a signing secret: set --operator-webhook-secret "+
			"(OUTBOX_RELAY_OPERATOR_WEBHOOK_SECRET)", ErrConfig)
	}
	return nil
}

// newOperatorHook returns the hook of a validated cfg; nil without an operator webhook.
func newOperatorHook(cfg Config) *operatorHook {
	if cfg.OperatorWebhookURL == "" {
		return nil
	}
	keys, _ := signature.Keys(signature.XSignature, signature.SplitSecrets(cfg.OperatorWebhookSecret))
	return &operatorHook{url: cfg.OperatorWebhookURL, signer: signature.NewSigner(keys),
		client: &http.Client{Timeout: operatorTimeout}, queue: make(chan []byte, operatorQueue),
		log: cfg.Logger.With().Str("component", "operator_webhook").Logger(), ua: "outbox-relay/" + cfg.Version,
		retry: time.Second}
}

// operatorEvent is the JSON an event is sent as (Standard-Webhooks-like: type, id, timestamp,
// data).
type operatorEvent struct {
	Type      string       `json:"type"`
	ID        string       `json:"id"`
	Timestamp time.Time    `json:"timestamp"`
	Data      operatorData `json:"data"`
}

type operatorData struct {
	Endpoint     string     `json:"endpoint"`
	Pipeline     string     `json:"pipeline"`
	Reason       string     `json:"reason,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
	DisabledAt   *time.Time `json:"disabled_at,omitempty"`
	RecoveredAt  *time.Time `json:"recovered_at,omitempty"`
	Failures     int        `json:"failures"`
}

// notifier returns notify, nil without an operator webhook.
func (o *operatorHook) notifier() func(publisher.EndpointEvent) {
	if o == nil {
		return nil
	}
	return o.notify
}

// notify queues ev; it never blocks (publisher.FanoutConfig.Notify).
func (o *operatorHook) notify(ev publisher.EndpointEvent) {
	at := ev.At.UTC()
	d := operatorData{Endpoint: ev.Endpoint, Pipeline: ev.Pipeline, Reason: ev.Reason, LastError: ev.LastError,
		Failures: ev.Failures}
	if !ev.FailingSince.IsZero() {
		t := ev.FailingSince.UTC()
		d.FailingSince = &t
	}
	if ev.Type == publisher.EventEndpointRecovered {
		d.RecoveredAt = &at
	} else {
		d.DisabledAt = &at
	}
	body, err := json.Marshal(operatorEvent{Type: ev.Type, ID: uuid.NewString(), Timestamp: at, Data: d})
	if err != nil {
		o.log.Error().Err(err).Msg("an operational event does not encode; dropped")
		return
	}
	select {
	case o.queue <- body:
	default:
		o.log.Warn().Str("type", ev.Type).Str("endpoint", ev.Endpoint).
			Msg("the operator webhook's queue is full (it is down or slow); this event is dropped, its log line stays")
	}
}

// run sends the queued events until ctx ends, then for up to operatorDrain those left.
func (o *operatorHook) run(ctx context.Context) {
	for {
		select {
		case body := <-o.queue:
			o.send(ctx, body)
		case <-ctx.Done():
			drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), operatorDrain)
			defer cancel()
			for {
				select {
				case body := <-o.queue:
					o.send(drain, body)
				default:
					return
				}
			}
		}
	}
}

// send delivers one event, retrying with backoff; a 2xx answer delivers it.
func (o *operatorHook) send(ctx context.Context, body []byte) {
	delay := o.retry
	var last error
	for attempt := 1; ; attempt++ {
		if last = o.post(ctx, body); last == nil {
			return
		}
		if attempt == operatorAttempts || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
			delay *= 2
		case <-ctx.Done(): // the next attempt fails at once: given up
		}
		t.Stop()
	}
	o.log.Warn().Err(last).RawJSON("event", body).Msg("the operator webhook did not take an operational event; dropped")
}

func (o *operatorHook) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", o.ua)
	req.Header.Set("X-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Signature", string(o.signer.AppendX(nil, ts, body)))
	resp, err := o.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the operator webhook answered %s", resp.Status)
	}
	return nil
}
