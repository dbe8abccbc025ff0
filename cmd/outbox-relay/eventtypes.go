package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/catalog"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

func newEventTypesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "event-types",
		Short: "List the event-type catalog, and sync it from a YAML file kept beside the application's code",
		Long: `Manages the event-type catalog, the rows of outbox_event_types: each event type the application
emits, with a description, a JSON Schema of its payload, an example and whether it is deprecated.
When the catalog is not empty, an endpoint's event-type pattern that matches no type in it is
refused with the nearest names, and producers that opt in have their payloads checked against
the schemas (docs/guides/event-types.md). Exit codes: 0 done, 1 a database error, 2 bad input
(with the reason; nothing is written).`,
		Example: `  outbox-relay event-types sync event-types.yaml --dry-run
  outbox-relay event-types list`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newEventTypesSyncCmd(), newEventTypesListCmd())
	return cmd
}

func addCatalogCommon(cmd *cobra.Command) {
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.Bool("json", false, "print the result as JSON")
}

func newEventTypesSyncCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sync FILE.yaml [flags]",
		Short: "Make the catalog hold the types of a YAML file: create and update them, report (or --prune) the others",
		Long: `Reads FILE.yaml (event_types: a list of name, description, schema, example, deprecated,
replaced_by; docs/guides/event-types.md), checks every type (a schema that does not compile, an
example it refuses, a replaced_by that names no type are refused with the reason), then in one
transaction creates the types that are new and updates those that differ. Types of the catalog
the file does not list are reported and kept; --prune removes them. --dry-run prints what would
change and writes nothing.`,
		Example: `  outbox-relay event-types sync event-types.yaml
  outbox-relay event-types sync event-types.yaml --prune --dry-run`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("event-types sync takes one argument, the YAML file")}
			}
			return nil
		},
	}
	addCatalogCommon(cmd)
	fs := cmd.Flags()
	fs.Bool("prune", false, "remove the types of the catalog the file does not list")
	fs.Bool("dry-run", false, "print what would change, write nothing")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		b, err := os.ReadFile(args[0])
		if err != nil {
			return usageError{fmt.Errorf("read the event-types file: %w", err)}
		}
		types, err := catalog.ParseFile(b)
		if err != nil {
			return usageError{fmt.Errorf("%s: %w", args[0], err)}
		}
		var opts catalog.SyncOptions
		opts.Prune, _ = fs.GetBool("prune")
		opts.DryRun, _ = fs.GetBool("dry-run")
		return withCatalog(cmd, func(ctx context.Context, conn *pgx.Conn, c catalog.Catalog) error {
			var rep catalog.SyncReport
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				var err error
				rep, err = c.Sync(ctx, tx, types, opts)
				return err
			})
			if err != nil {
				return catalogError(err)
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			printSync(cmd.OutOrStdout(), rep, opts)
			return nil
		})
	}
	return cmd
}

func printSync(w io.Writer, rep catalog.SyncReport, opts catalog.SyncOptions) {
	verb := map[bool]string{false: "", true: "would be "}[opts.DryRun]
	for _, l := range []struct {
		what  string
		names []string
	}{{"created", rep.Created}, {"updated", rep.Updated}, {"removed", rep.Removed}} {
		if len(l.names) > 0 {
			fmt.Fprintf(w, "%s%s: %s\n", verb, l.what, strings.Join(l.names, ", "))
		}
	}
	if len(rep.Unchanged) > 0 {
		fmt.Fprintf(w, "unchanged: %d\n", len(rep.Unchanged))
	}
	if len(rep.Unlisted) > 0 {
		fmt.Fprintf(w, "not in the file, kept (--prune removes them): %s\n", strings.Join(rep.Unlisted, ", "))
	}
	if opts.DryRun {
		fmt.Fprintln(w, "dry run: nothing written")
	}
}

func newEventTypesListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List the event types of the catalog, sorted by name",
		Long: `Lists the catalog's event types with their description and whether they are deprecated (and what
replaces them). --json prints every field, schemas and examples included.`,
		Example: `  outbox-relay event-types list
  outbox-relay event-types list --json | jq '.[] | select(.deprecated) | .name'`,
		Args: noArgs,
	}
	addCatalogCommon(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withCatalog(cmd, func(ctx context.Context, conn *pgx.Conn, c catalog.Catalog) error {
			types, err := c.List(ctx, conn)
			if err != nil {
				return catalogError(err)
			}
			if wantJSON(cmd) {
				if types == nil {
					types = []catalog.Type{}
				}
				return printJSON(cmd.OutOrStdout(), types)
			}
			return printTypes(cmd.OutOrStdout(), types)
		})
	}
	return cmd
}

func printTypes(w io.Writer, types []catalog.Type) error {
	if len(types) == 0 {
		_, err := fmt.Fprintln(w, "the catalog is empty: endpoint patterns are not checked (outbox-relay event-types sync FILE.yaml fills it)")
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCHEMA\tDEPRECATED\tDESCRIPTION")
	for _, t := range types {
		dep := ""
		if t.Deprecated {
			dep = "yes"
			if t.ReplacedBy != "" {
				dep = "use " + t.ReplacedBy
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, map[bool]string{false: "-", true: "yes"}[t.Schema != nil], dep, firstLine(t.Description))
	}
	return tw.Flush()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// withCatalog connects, checks that the relay's schema has the catalog's table, and runs f.
func withCatalog(cmd *cobra.Command, f func(ctx context.Context, conn *pgx.Conn, c catalog.Catalog) error) error {
	fs := cmd.Flags()
	dsn, err := requireDSN(fs)
	if err != nil {
		return err
	}
	conn, s, err := connectSchema(cmd.Context(), fs, dsn, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := relayTableIn(cmd.Context(), conn, schemaName(fs, ""), s, schema.EventTypes, 16); err != nil {
		return err
	}
	return f(cmd.Context(), conn, catalog.Catalog{Schema: s})
}

// catalogError makes bad input a usage error (exit 2), and drops the package's prefix.
func catalogError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "catalog: ")
	if errors.Is(err, catalog.ErrInvalid) {
		return usageError{errors.New(msg)}
	}
	return errors.New(msg)
}
