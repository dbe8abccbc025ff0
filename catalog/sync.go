package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// SyncOptions tune Sync.
type SyncOptions struct {
	// Prune removes the types of the catalog that the file does not list. False: they are kept
	// and reported (SyncReport.Unlisted).
	Prune bool
	// DryRun reports what Sync would do and writes nothing.
	DryRun bool
}

// SyncReport is what Sync did (or, with DryRun, would do), each list sorted by name.
type SyncReport struct {
	Created   []string `json:"created"`
	Updated   []string `json:"updated"`
	Unchanged []string `json:"unchanged"`
	// Unlisted are the types of the catalog that the file does not list, kept (without Prune).
	Unlisted []string `json:"unlisted"`
	// Removed are the types the file does not list, removed (with Prune).
	Removed []string `json:"removed"`
}

// Sync makes the catalog hold the types of a file (ParseFile's), in q's transaction: each type
// is created or replaced when it differs; the types the file does not list are reported, and
// removed with opts.Prune. Run it in a transaction so that it applies whole or not at all (the
// CLI does). A replaced_by must name a type of the file or of the catalog that stays.
func (c Catalog) Sync(ctx context.Context, q Querier, types []Type, opts SyncOptions) (SyncReport, error) {
	var rep SyncReport
	have, err := c.List(ctx, q)
	if err != nil {
		return rep, err
	}
	byName := make(map[string]Type, len(have))
	for _, t := range have {
		byName[t.Name] = t
	}
	listed := make(map[string]bool, len(types))
	for i, t := range types {
		if types[i], err = Check(t); err != nil {
			return rep, fmt.Errorf("catalog: sync: %w", err)
		}
		listed[t.Name] = true
	}
	for _, t := range have {
		if !listed[t.Name] {
			if opts.Prune {
				rep.Removed = append(rep.Removed, t.Name)
			} else {
				rep.Unlisted = append(rep.Unlisted, t.Name)
			}
		}
	}
	if err := checkReplacements(types, byName, opts.Prune); err != nil {
		return rep, err
	}
	var writes []Type
	for _, t := range types {
		old, ok := byName[t.Name]
		switch {
		case !ok:
			rep.Created = append(rep.Created, t.Name)
		case same(old, t):
			rep.Unchanged = append(rep.Unchanged, t.Name)
			continue
		default:
			rep.Updated = append(rep.Updated, t.Name)
		}
		writes = append(writes, t)
	}
	sortReport(&rep)
	if opts.DryRun {
		return rep, nil
	}
	for _, t := range writes {
		if _, _, err := c.put(ctx, q, t); err != nil {
			return rep, err
		}
	}
	for _, name := range rep.Removed {
		if err := c.Delete(ctx, q, name); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// checkReplacements refuses a replaced_by that names no type after the sync.
func checkReplacements(types []Type, have map[string]Type, prune bool) error {
	after := make(map[string]bool, len(types)+len(have))
	for _, t := range types {
		after[t.Name] = true
	}
	if !prune {
		for name := range have {
			after[name] = true
		}
	}
	for _, t := range types {
		if t.ReplacedBy != "" && !after[t.ReplacedBy] {
			return fmt.Errorf("catalog: sync: %w %s: replaced_by %s would not be in the catalog: list it in the file", ErrInvalid, t.Name, t.ReplacedBy)
		}
	}
	return nil
}

// same reports whether a stored type already is t: the JSON compared as values (jsonb orders
// keys its own way).
func same(stored, t Type) bool {
	return stored.Description == t.Description && stored.Deprecated == t.Deprecated && stored.ReplacedBy == t.ReplacedBy &&
		sameJSON(stored.Schema, t.Schema) && sameJSON(stored.Example, t.Example)
}

func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	va, errA := decodeNumbers(a)
	vb, errB := decodeNumbers(b)
	return errA == nil && errB == nil && reflect.DeepEqual(va, vb)
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func sortReport(r *SyncReport) {
	for _, l := range []*[]string{&r.Created, &r.Updated, &r.Unchanged, &r.Unlisted, &r.Removed} {
		sortStrings(*l)
	}
}
