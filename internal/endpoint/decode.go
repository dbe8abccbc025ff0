package endpoint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// SetColumn sets the field of column name from its value in PostgreSQL's text format (as a
// pgoutput tuple carries it), or to its zero value when null. A column the row does not know
// (one a later migration adds) is ignored, so a relay keeps reading a newer table.
func (r *Row) SetColumn(name string, text []byte, null bool) error {
	if null {
		return r.setNull(name)
	}
	s := string(text)
	var err error
	switch name {
	case "id":
		r.ID = s
	case "url":
		r.URL = s
	case "secrets":
		r.Secrets = nil
		err = json.Unmarshal(text, &r.Secrets)
	case "scheme":
		r.Scheme = s
	case "format":
		r.Format = s
	case "batch_max_events":
		r.BatchMaxEvents, err = strconv.Atoi(s)
	case "batch_max_bytes":
		r.BatchMaxBytes, err = strconv.Atoi(s)
	case "batch_linger_ms":
		r.BatchLingerMS, err = strconv.Atoi(s)
	case "tenant_id":
		r.TenantID = s
	case "event_types":
		r.EventTypes, err = textArray(text)
	case "aggregate_types":
		r.AggregateTypes, err = textArray(text)
	case "rate_limit":
		r.RateLimit, err = strconv.Atoi(s)
	case "max_in_flight":
		r.MaxInFlight, err = strconv.Atoi(s)
	case "state":
		r.State = s
	case "paused_reason":
		r.PausedReason = s
	case "paused_at":
		r.PausedAt, err = timestamptz(text)
	case "disabled_reason":
		r.DisabledReason = s
	case "disabled_at":
		r.DisabledAt, err = timestamptz(text)
	case "allow_private_url":
		r.AllowPrivateURL, err = strconv.ParseBool(s)
	case "metadata":
		r.Metadata = json.RawMessage(s)
	case "description":
		r.Description = s
	case "created_at":
		r.CreatedAt, err = timestamptz(text)
	case "updated_at":
		r.UpdatedAt, err = timestamptz(text)
	case "spill_after_ms":
		r.SpillAfterMS, err = strconv.Atoi(s)
	case "deny_private":
		r.DenyPrivate, err = strconv.ParseBool(s)
	case "egress_proxy":
		r.EgressProxy = s
	}
	if err != nil {
		return fmt.Errorf("%s column %s: %w", schema.Endpoints, name, err)
	}
	return nil
}

func (r *Row) setNull(name string) error {
	switch name {
	case "tenant_id":
		r.TenantID = ""
	case "aggregate_types":
		r.AggregateTypes = nil
	case "rate_limit":
		r.RateLimit = 0
	case "max_in_flight":
		r.MaxInFlight = 0
	case "paused_reason":
		r.PausedReason = ""
	case "paused_at":
		r.PausedAt = time.Time{}
	case "disabled_reason":
		r.DisabledReason = ""
	case "disabled_at":
		r.DisabledAt = time.Time{}
	case "metadata":
		r.Metadata = nil
	case "description":
		r.Description = ""
	case "spill_after_ms":
		r.SpillAfterMS = 0
	case "egress_proxy":
		r.EgressProxy = ""
	case "id", "url", "secrets", "scheme", "format", "batch_max_events", "batch_max_bytes", "batch_linger_ms",
		"event_types", "state", "allow_private_url", "created_at", "updated_at", "deny_private":
		return fmt.Errorf("%s column %s is NULL, which the table does not allow", schema.Endpoints, name)
	}
	return nil
}

// textArray and timestamptz decode with a map of their own: endpoint changes are rare, and a
// pgtype.Map caches plans without a lock.
func textArray(text []byte) ([]string, error) {
	var a pgtype.FlatArray[string]
	if err := pgtype.NewMap().Scan(pgtype.TextArrayOID, pgtype.TextFormatCode, text, &a); err != nil {
		return nil, err
	}
	return []string(a), nil
}

func timestamptz(text []byte) (time.Time, error) {
	var t pgtype.Timestamptz
	if err := pgtype.NewMap().Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, text, &t); err != nil {
		return time.Time{}, err
	}
	return t.Time, nil
}
