package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/relay"
)

func newPauseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Hold a pipeline's delivery without losing its position",
		Long: `Pauses a pipeline through the database (outbox_pipeline_control): whichever process leads the
pipeline stops sending within about a second, and a standby that takes over stays paused. The slot
keeps its position, so the server retains WAL meanwhile (outbox-relay status shows how much), and
nothing is lost. Resume with outbox-relay resume.`,
		Example: `  outbox-relay pause --reason "partner maintenance until 14:00"
  outbox-relay pause --pipeline billing`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	addPipelineFlag(fs)
	fs.String("reason", "", "why, shown by outbox-relay status and logged by the relay")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		reason, _ := fs.GetString("reason")
		if reason == "" {
			reason = "paused by outbox-relay pause"
		}
		return setPaused(cmd, fs, true, reason)
	}
	return cmd
}

func newResumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume a paused pipeline",
		Long: `Resumes a pipeline paused by outbox-relay pause or by a 410 Gone answer: the leader sends the
events it holds, in order per aggregate, within about a second.`,
		Example: `  outbox-relay resume
  outbox-relay resume --pipeline billing`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	addPipelineFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return setPaused(cmd, fs, false, "") }
	return cmd
}

func addPipelineFlag(fs *pflag.FlagSet) {
	fs.String("pipeline", publisher.DefaultPipeline, "the pipeline's name")
}

func pipelineName(fs *pflag.FlagSet) (string, error) {
	name, _ := fs.GetString("pipeline")
	if name == "" {
		return "", usageError{errors.New("--pipeline must not be empty; the single pipeline of a relay is named default")}
	}
	return name, nil
}

func setPaused(cmd *cobra.Command, fs *pflag.FlagSet, paused bool, reason string) error {
	dsn, err := requireDSN(fs)
	if err != nil {
		return err
	}
	name, err := pipelineName(fs)
	if err != nil {
		return err
	}
	conn, s, err := connectSchema(cmd.Context(), fs, dsn, "")
	if err != nil {
		return err
	}
	defer conn.Close(cmd.Context())
	c, err := control.SetPaused(cmd.Context(), conn, s, name, paused, reason)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if c.Paused {
		fmt.Fprintf(w, "pipeline %q paused (%s); the relay stops sending within about a second; `outbox-relay resume --pipeline %s` resumes it\n",
			name, c.Reason, name)
		return nil
	}
	fmt.Fprintf(w, "pipeline %q resumed; the relay sends what it holds within about a second\n", name)
	return nil
}

// addControlFlags adds the run flags of the pipeline's control.
func addControlFlags(fs *pflag.FlagSet) {
	addSetting(fs, "on-gone")
}

func controlConfig(fs *pflag.FlagSet, cfg *relay.Config) error {
	v, _ := fs.GetString("on-gone")
	a, err := publisher.ParseGoneAction(v)
	if err != nil {
		return usageError{fmt.Errorf("--on-gone: %w", err)}
	}
	cfg.Control.OnGone = a
	return nil
}
