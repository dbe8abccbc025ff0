package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/publisher/natsdest"
	"github.com/outbox-relay/outbox-relay/relay"
)

var natsURLFlag = envFlag{name: "nats-url", env: "NATS_URL"}

// addBrokerFlags adds the flags that select a broker destination instead of the webhook.
func addBrokerFlags(fs *pflag.FlagSet) {
	fs.String(natsURLFlag.name, "", "publish to NATS JetStream at this server (comma-separated for several) instead of a webhook (env NATS_URL)")
	fs.String("nats-subject", natsdest.DefaultSubject, "NATS subject template; placeholders {aggregate_type}, {aggregate_id}, {event_type}")
	fs.String("nats-creds-file", "", "NATS credentials file (JWT and NKey seed)")
	fs.String("nats-tls-ca", "", "PEM file of the CA that signed the NATS servers' certificates")
	fs.String("nats-tls-cert", "", "PEM client certificate for NATS (with --nats-tls-key)")
	fs.String("nats-tls-key", "", "PEM key of --nats-tls-cert")
	fs.String("nats-create-stream", "", "if no JetStream stream captures the subjects, create one with this name (file storage)")
	fs.Int("nats-stream-replicas", 1, "replicas of the stream --nats-create-stream creates (1 to 5)")
	fs.Duration("nats-stream-max-age", 0, "max age of messages in the stream --nats-create-stream creates; 0 = no limit")
}

// brokerConfig reads the broker flags: ok is false when none selects a broker (the webhook
// then). Their errors name the fix.
func brokerConfig(fs *pflag.FlagSet) (d relay.DestinationConfig, ok bool, err error) {
	url := stringFrom(fs, natsURLFlag)
	if url == "" {
		for _, name := range []string{"nats-subject", "nats-creds-file", "nats-tls-ca", "nats-tls-cert", "nats-tls-key",
			"nats-create-stream", "nats-stream-replicas", "nats-stream-max-age"} {
			if fs.Changed(name) {
				return d, false, usageError{fmt.Errorf("--%s needs --nats-url (or NATS_URL): it configures the NATS destination", name)}
			}
		}
		return d, false, nil
	}
	if stringFrom(fs, urlFlag) != "" {
		return d, false, usageError{errors.New("both --webhook-url (WEBHOOK_URL) and --nats-url (NATS_URL) are set: a pipeline has exactly one destination, drop one")}
	}
	c := &natsdest.Config{URL: url}
	c.Subject, _ = fs.GetString("nats-subject")
	c.CredsFile, _ = fs.GetString("nats-creds-file")
	c.TLS.CA, _ = fs.GetString("nats-tls-ca")
	c.TLS.Cert, _ = fs.GetString("nats-tls-cert")
	c.TLS.Key, _ = fs.GetString("nats-tls-key")
	if name, _ := fs.GetString("nats-create-stream"); strings.TrimSpace(name) != "" {
		s := &natsdest.StreamConfig{Name: strings.TrimSpace(name)}
		s.Replicas, _ = fs.GetInt("nats-stream-replicas")
		s.MaxAge, _ = fs.GetDuration("nats-stream-max-age")
		c.CreateStream = s
	}
	if err := c.Validate(); err != nil {
		return d, false, usageError{err}
	}
	d.NATS = c
	return d, true, nil
}
