package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Flags for PostgreSQL 16-18 features: failover slots and decoding from a standby (docs/guides/failover.md,
// docs/guides/postgresql-versions.md).

var replicationDSNFlag = envFlag{name: "replication-dsn", env: "REPLICATION_DSN"}

func addFailoverFlags(fs *pflag.FlagSet) {
	addSetting(fs, "failover")
	addSetting(fs, replicationDSNFlag.name)
}

func failoverConfig(fs *pflag.FlagSet, cfg *relay.Config) error {
	v, _ := fs.GetString("failover")
	mode, err := parseFailover(v)
	if err != nil {
		return usageError{err}
	}
	cfg.Failover = mode
	cfg.ReplicationDSN = stringFrom(fs, replicationDSNFlag)
	return nil
}

func parseFailover(v string) (cdc.FailoverMode, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto":
		return cdc.FailoverAuto, nil
	case "true", "on", "yes", "1":
		return cdc.FailoverOn, nil
	case "false", "off", "no", "0":
		return cdc.FailoverOff, nil
	}
	return 0, fmt.Errorf("--failover=%q: set auto, true or false", v)
}
