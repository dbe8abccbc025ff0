package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/relay"
)

func newReshardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reshard",
		Short: "Change a pipeline's shard count while producers write, losing and reordering nothing",
		Long: `Changes pipeline NAME (from --config) to --to shards, in four steps, each recorded in
outbox_reshard and shown by status; re-running after an interruption continues where it stopped:
1. create the new shards' publications and slots, record the highest of their start positions as
   the fence F, and advance every new slot to F (the new shards skip what committed at or before F);
2. wait until every old slot has confirmed F: the old shards' relays deliver up to it and retire by
   themselves, while the new shards' relays (already started with shards: --to, or started now)
   deliver nothing until then;
3. drop the old shards' slots and publications, once no relay streams them (a log line each);
4. mark the reshard done. Relays refuse a shards: that contradicts it from then on.
docs/guides/shards.md, Changing N.`,
		Example: `  outbox-relay reshard --config relay.yaml --pipeline orders --to 4 --dry-run
  outbox-relay reshard --config relay.yaml --pipeline orders --to 4`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.String(configFlag.name, "", "the pipelines file that names the pipeline (env OUTBOX_RELAY_CONFIG; required)")
	fs.String("pipeline", "", "the pipeline to reshard (required)")
	fs.Int("to", 0, "the new shard count, 1 to 256 (required)")
	fs.Bool("dry-run", false, "print the plan and the current step; change nothing")
	fs.Duration("wait", 10*time.Minute, "how long to wait for the old shards to reach the fence and let go of their slots; re-run to wait more")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		rc, err := reshardArgs(fs)
		if err != nil {
			return err
		}
		conn, s, err := connectSchema(cmd.Context(), fs, rc.dsn, rc.fileSchema)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		r := rc.r
		r.Schema, r.Out = s, cmd.OutOrStdout()
		return r.Run(cmd.Context(), conn)
	}
	return cmd
}

// reshardCmd is what the flags of `reshard` say: the reshard to run (its Schema and Out are
// filled once connected) and the file's schema:.
type reshardCmd struct {
	r          control.Resharder
	dsn        string
	fileSchema string
}

func reshardArgs(fs *pflag.FlagSet) (reshardCmd, error) {
	rc := reshardCmd{}
	var err error
	if rc.dsn, err = requireDSN(fs); err != nil {
		return rc, err
	}
	path := stringFrom(fs, configFlag)
	name, _ := fs.GetString("pipeline")
	to, _ := fs.GetInt("to")
	rc.r.DryRun, _ = fs.GetBool("dry-run")
	rc.r.Wait, _ = fs.GetDuration("wait")
	if path == "" || name == "" || to < 1 || to > relay.MaxShards {
		return rc, usageError{errors.New("reshard needs --config FILE --pipeline NAME --to N (N from 1 to 256)")}
	}
	file, err := pipeconf.Load(path)
	if err != nil {
		return rc, usageError{err}
	}
	rc.fileSchema = file.Schema
	for _, p := range file.Pipelines {
		if p.Name == name {
			p.Shards, p.Shard = 0, nil // the unsharded view: its slot is the one the shards' derive from
			rc.r = control.Resharder{DSN: rc.dsn, Pipeline: p.Name, Slot: p.WithDefaults().Slot, To: to,
				Shards: shardsOf(p), DryRun: rc.r.DryRun, Wait: rc.r.Wait}
			return rc, nil
		}
	}
	return rc, usageError{fmt.Errorf("--pipeline %q: no such pipeline in %s", name, path)}
}

// shardsOf returns the n shards of p (its unsharded view), defaults applied, as the relay
// names them.
func shardsOf(p relay.Pipeline) func(n int) []control.Shard {
	return func(n int) []control.Shard {
		p.Shards = n
		var out []control.Shard
		for _, s := range p.ShardPipelines() {
			s = s.WithDefaults()
			out = append(out, control.Shard{Name: s.Name, Slot: s.Slot, Publication: s.Publication, Filter: s.Filter})
		}
		return out
	}
}
