package relay

import (
	"fmt"
	"strconv"
)

// MaxShards is the largest Pipeline.Shards.
const MaxShards = 256

// ShardKey is the SQL expression of the ordering key that shards hash: one aggregate is one
// key, so it lives in exactly one shard and keeps its order there.
const ShardKey = "aggregate_type || ':' || aggregate_id"

// ShardExpr is the SQL expression whose value (0 to n-1) is the shard of a row among n:
// hashtextextended, the text hash that hash partitioning relies on and which is therefore kept
// stable across major versions, taken modulo n and made non-negative. hashtextextended returns
// bigint, so the modulo never overflows (abs() of an int4 hash can); ((h % n) + n) % n is the
// floored modulo (Python's h % n, Java's Math.floorMod). A consumer computes the shard of an
// aggregate with
//
//	SELECT ((hashtextextended($1 || ':' || $2, 0) % n) + n) % n  -- $1 aggregate_type, $2 aggregate_id
//
// PostgreSQL accepts it in a publication's row filter: built-in immutable functions and
// operators over the row's columns only.
func ShardExpr(n int) string {
	return fmt.Sprintf("((hashtextextended(%s, 0) %% %d) + %d) %% %d", ShardKey, n, n, n)
}

// ShardFilter is the row filter of shard i of n of a pipeline whose own filter is user (empty:
// every row).
func ShardFilter(user string, n, i int) string {
	f := fmt.Sprintf("%s = %d", ShardExpr(n), i)
	if user == "" {
		return f
	}
	return "(" + user + ") AND " + f
}

// ShardName is the name that keys shard i of n of pipeline name in the database (its control
// row, dead letters, parked aggregates) and names its slot and publication by default:
// <name>_s<i>of<n>.
func ShardName(name string, n, i int) string {
	return fmt.Sprintf("%s_s%dof%d", name, i, n)
}

// shardInfo is set on each pipeline expanded from a sharded one.
type shardInfo struct {
	family string // the configured pipeline's name: the pipeline label, the control row
	index  int
	of     int
	label  bool // the process runs a sharded pipeline: every series has a shard label
	// pinned: the process was told to run this shard (--shard, or shard: in the file), as a
	// shard pod is; standing by while another process streams it is then a ready state.
	pinned bool
	// slotBase is the slot the shards' slots are named after: Slot, or outbox_relay_<name>.
	slotBase string
}

// family is the configured pipeline's name: Name itself unless p is a shard.
func (p *Pipeline) family() string {
	if p.shard.of > 0 {
		return p.shard.family
	}
	return p.Name
}

// Family is the configured pipeline's name: Name itself, or, for a shard from ShardPipelines or
// Run's expansion, the name of the pipeline it was split from.
func (p Pipeline) Family() string { return p.family() }

// ShardPipelines returns every shard of p (Shard is not applied), defaults not applied, or p
// itself when it is not sharded: what `status` and `drop-pipeline` look at.
func (p Pipeline) ShardPipelines() []Pipeline {
	p.Shard = nil
	return p.expandShards()
}

// labels are the pipeline's labels on every series: pipeline=<configured name>, and, when the
// process runs a sharded pipeline, shard=<index> ("0" for a pipeline that is not sharded: the
// one shard of one), so every series of a registry has the same label names.
func (p *Pipeline) labels() map[string]string {
	l := map[string]string{"pipeline": p.family()}
	if p.shard.label {
		l["shard"] = strconv.Itoa(p.shard.index)
	}
	return l
}

// validateShards checks Shards and Shard.
func (p *Pipeline) validateShards() error {
	if p.Shards < 0 || p.Shards > MaxShards {
		return fmt.Errorf("%w %q: shards %d: want 1 to %d (0 or 1: not sharded)", ErrPipeline, p.Name, p.Shards, MaxShards)
	}
	if p.Shard != nil && (*p.Shard < 0 || *p.Shard >= max(p.Shards, 1)) {
		return fmt.Errorf("%w %q: shard %d does not exist: with shards %d, shard is 0 to %d", ErrPipeline, p.Name,
			*p.Shard, max(p.Shards, 1), max(p.Shards, 1)-1)
	}
	return nil
}

// expandShards returns p's shards, the ones selected by p.Shard (nil: all), or p itself when it
// is not sharded. Each shard is a pipeline: its own name, slot, publication and row filter.
func (p Pipeline) expandShards() []Pipeline {
	if p.Shards <= 1 {
		return []Pipeline{p}
	}
	var out []Pipeline
	for i := range p.Shards {
		if p.Shard != nil && *p.Shard != i {
			continue
		}
		s := p
		s.Name = ShardName(p.Name, p.Shards, i)
		s.Filter = ShardFilter(p.Filter, p.Shards, i)
		if p.Slot != "" {
			s.Slot = ShardName(p.Slot, p.Shards, i)
		}
		if p.Publication != "" {
			s.Publication = ShardName(p.Publication, p.Shards, i)
		}
		s.Shard = nil
		s.shard = shardInfo{family: p.Name, index: i, of: p.Shards, slotBase: p.WithDefaults().Slot}
		out = append(out, s)
	}
	return out
}
