package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/destination/kafkadest"
	"github.com/outbox-relay/outbox-relay/destination/natsdest"
	"github.com/outbox-relay/outbox-relay/internal/settings"
)

var (
	natsURLFlag      = envFlag{name: "nats-url", env: "NATS_URL"}
	kafkaBrokersFlag = envFlag{name: "kafka-brokers", env: "KAFKA_BROKERS"}
	kafkaPassFlag    = envFlag{name: "kafka-sasl-password", env: "KAFKA_SASL_PASSWORD"}
)

var natsFlags = []string{"nats-subject", "nats-creds-file", "nats-tls-ca", "nats-tls-cert", "nats-tls-key",
	"nats-create-stream", "nats-stream-replicas", "nats-stream-max-age"}

var kafkaFlags = []string{"kafka-topic", "kafka-sasl-mechanism", "kafka-sasl-user", "kafka-sasl-password",
	"kafka-sasl-password-file", "kafka-tls", "kafka-tls-ca", "kafka-tls-cert", "kafka-tls-key", "kafka-compression"}

// addBrokerFlags adds the flags that select a broker destination instead of the webhook.
func addBrokerFlags(fs *pflag.FlagSet) {
	addSetting(fs, natsURLFlag.name)
	addSetting(fs, "nats-subject")
	addSetting(fs, "nats-creds-file")
	addSetting(fs, "nats-tls-ca")
	addSetting(fs, "nats-tls-cert")
	addSetting(fs, "nats-tls-key")
	addSetting(fs, "nats-create-stream")
	addSetting(fs, "nats-stream-replicas")
	addSetting(fs, "nats-stream-max-age")
	addSetting(fs, kafkaBrokersFlag.name)
	addSetting(fs, "kafka-topic")
	addSetting(fs, "kafka-sasl-mechanism")
	addSetting(fs, "kafka-sasl-user")
	addSetting(fs, kafkaPassFlag.name)
	addSetting(fs, "kafka-sasl-password-file")
	addSetting(fs, "kafka-tls")
	addSetting(fs, "kafka-tls-ca")
	addSetting(fs, "kafka-tls-cert")
	addSetting(fs, "kafka-tls-key")
	addSetting(fs, "kafka-compression")
}

// brokerConfig reads the broker flags: ok is false when none selects a broker (the webhook
// then). Their errors name the fix.
func brokerConfig(fs *pflag.FlagSet) (d destination.Opener, ok bool, err error) {
	natsURL, brokers := stringFrom(fs, natsURLFlag), stringFrom(fs, kafkaBrokersFlag)
	if natsURL == "" {
		for _, name := range natsFlags {
			if fs.Changed(name) {
				return d, false, usageError{fmt.Errorf("--%s needs --nats-url (or NATS_URL): it configures the NATS destination", name)}
			}
		}
	}
	if brokers == "" {
		for _, name := range kafkaFlags {
			if fs.Changed(name) {
				return d, false, usageError{fmt.Errorf("--%s needs --kafka-brokers (or KAFKA_BROKERS): it configures the Kafka destination", name)}
			}
		}
	}
	if natsURL == "" && brokers == "" {
		return d, false, nil
	}
	var given []string
	if stringFrom(fs, urlFlag) != "" {
		given = append(given, "--webhook-url (WEBHOOK_URL)")
	}
	if natsURL != "" {
		given = append(given, "--nats-url (NATS_URL)")
	}
	if brokers != "" {
		given = append(given, "--kafka-brokers (KAFKA_BROKERS)")
	}
	if err := settings.OneDestination(given...); err != nil {
		return d, false, usageError{err}
	}
	if brokers != "" {
		c := kafkadest.Config{Brokers: brokers}
		c.Topic, _ = fs.GetString("kafka-topic")
		c.SASL.Mechanism, _ = fs.GetString("kafka-sasl-mechanism")
		c.SASL.User, _ = fs.GetString("kafka-sasl-user")
		c.SASL.Password = stringFrom(fs, kafkaPassFlag)
		c.SASL.PasswordFile, _ = fs.GetString("kafka-sasl-password-file")
		c.TLS.Enabled, _ = fs.GetBool("kafka-tls")
		c.TLS.CA, _ = fs.GetString("kafka-tls-ca")
		c.TLS.Cert, _ = fs.GetString("kafka-tls-cert")
		c.TLS.Key, _ = fs.GetString("kafka-tls-key")
		c.Compression, _ = fs.GetString("kafka-compression")
		if err := c.Validate(); err != nil {
			return d, false, usageError{err}
		}
		return c, true, nil
	}
	c := natsdest.Config{URL: natsURL}
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
	return c, true, nil
}
