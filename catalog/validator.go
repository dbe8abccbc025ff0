package catalog

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMaxAge is how long a Validator uses the catalog it read when ValidatorConfig.MaxAge is
// zero.
const DefaultMaxAge = time.Minute

// minReload is the least time between two reads of the catalog caused by unknown event types.
const minReload = time.Second

// ValidatorConfig configures a Validator.
type ValidatorConfig struct {
	// Schema is the PostgreSQL schema of the relay's tables (as outbox.Schema). Empty: as the
	// connection's search_path resolves outbox_event_types.
	Schema string
	// MaxAge is how long the catalog read is used before it is read again: a change of a
	// type's schema reaches the validation within MaxAge. Zero: DefaultMaxAge.
	MaxAge time.Duration
}

// Validator checks payloads against their type's schema for outbox.Producer: give it to a
// producer to opt in. It reads the whole catalog through its own querier (a pool, not the
// producer's transaction, which a failed read would abort), compiles each schema on first use,
// and keeps both for MaxAge; an event type it does not know makes it read again at once (at
// most once a second). It is safe for concurrent use.
type Validator struct {
	q   Querier
	cat Catalog
	age time.Duration

	reload sync.Mutex // one read of the catalog at a time
	mu     sync.RWMutex
	types  map[string]*entry // nil until the first read
	read   time.Time         // when types was read
}

type entry struct {
	t    Type
	once sync.Once
	s    *compiled
	err  error
}

// NewValidator returns a Validator that reads the catalog through q (a *pgxpool.Pool, say).
func NewValidator(q Querier, cfg ValidatorConfig) *Validator {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	return &Validator{q: q, cat: Catalog{Schema: cfg.Schema}, age: cfg.MaxAge}
}

// ValidatePayload checks a payload of eventType: nil when the catalog is empty, when the type
// has no schema, or when the schema accepts it; a *PayloadError (ErrPayload) with the JSON
// pointer at fault when it does not; an *UnknownPatternError (ErrUnknownType) with the nearest
// names when the catalog is not empty and does not hold the type. This is outbox.Validator.
func (v *Validator) ValidatePayload(ctx context.Context, eventType string, payload []byte) error {
	e, types, err := v.lookup(ctx, eventType)
	if err != nil {
		return err
	}
	if e == nil {
		if len(types) == 0 {
			return nil
		}
		list := make([]Type, 0, len(types))
		for _, t := range types {
			list = append(list, t.t)
		}
		return &UnknownPatternError{Pattern: eventType, Suggestions: Suggest(eventType, list)}
	}
	if e.t.Schema == nil {
		return nil
	}
	e.once.Do(func() { e.s, e.err = compile(e.t.Name, e.t.Schema) })
	if e.err != nil {
		return fmt.Errorf("catalog: event type %s: its schema in the catalog does not compile: fix it (`outbox-relay event-types sync`): %w", eventType, e.err)
	}
	if err := e.s.validate(payload); err != nil {
		if pe, ok := err.(*PayloadError); ok {
			pe.EventType = eventType
		}
		return err
	}
	return nil
}

// Refresh reads the catalog now.
func (v *Validator) Refresh(ctx context.Context) error {
	v.reload.Lock()
	defer v.reload.Unlock()
	return v.readLocked(ctx)
}

// lookup returns the entry of eventType (nil when the catalog does not hold it) and the
// catalog it looked in, reading the catalog first when it is older than MaxAge, and again when
// the type is not in it and the last read is older than a second.
func (v *Validator) lookup(ctx context.Context, eventType string) (*entry, map[string]*entry, error) {
	v.mu.RLock()
	types, read := v.types, v.read
	v.mu.RUnlock()
	e := types[eventType]
	stale := types == nil || time.Since(read) >= v.age
	if !stale && (e != nil || time.Since(read) < minReload) {
		return e, types, nil
	}
	v.reload.Lock()
	defer v.reload.Unlock()
	v.mu.RLock()
	again := v.read != read // another caller read it meanwhile
	v.mu.RUnlock()
	if !again {
		if err := v.readLocked(ctx); err != nil {
			return nil, nil, err
		}
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.types[eventType], v.types, nil
}

func (v *Validator) readLocked(ctx context.Context) error {
	list, err := v.cat.List(ctx, v.q)
	if err != nil {
		return fmt.Errorf("validate the payload: %w", err)
	}
	types := make(map[string]*entry, len(list))
	v.mu.RLock()
	for _, t := range list {
		if old := v.types[t.Name]; old != nil && same(old.t, t) {
			types[t.Name] = old // keep what it compiled
		} else {
			types[t.Name] = &entry{t: t}
		}
	}
	v.mu.RUnlock()
	v.mu.Lock()
	v.types, v.read = types, time.Now()
	v.mu.Unlock()
	return nil
}
