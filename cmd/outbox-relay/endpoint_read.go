package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/endpoints"
)

// listPage is how many endpoints list reads per query: its memory stays bounded whatever the
// number of endpoints, and each page is printed before the next is read.
const listPage = 500

func newEndpointListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List endpoints, sorted by id, page by page (secrets as fingerprints)",
		Long: `Lists the endpoints sorted by id, reading and printing them a page at a time, so it serves
thousands of endpoints in bounded memory. With --json it prints one JSON array, streamed.`,
		Example: `  outbox-relay endpoint list --tenant acme
  outbox-relay endpoint list --state disabled --json | jq -r '.[].id'`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	addEndpointCommon(fs)
	fs.String("tenant", "", "only this tenant's endpoints")
	fs.String("state", "", "only endpoints in this state: enabled, paused or disabled")
	fs.String("after", "", "start after this id (to resume a listing)")
	fs.Int("limit", 0, "print at most this many; 0 = all")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var f endpoints.Filter
		f.TenantID, _ = fs.GetString("tenant")
		state, _ := fs.GetString("state")
		f.State = endpoints.State(state)
		switch f.State {
		case "", endpoints.Enabled, endpoints.Paused, endpoints.Disabled:
		default:
			return usageError{fmt.Errorf("--state %q: use enabled, paused or disabled", state)}
		}
		f.After, _ = fs.GetString("after")
		most, _ := fs.GetInt("limit")
		if most < 0 {
			return usageError{errors.New("--limit must not be negative; 0 lists every endpoint")}
		}
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			return listEndpoints(ctx, cmd.OutOrStdout(), conn, eps, f, most, wantJSON(cmd))
		})
	}
	return cmd
}

// listEndpoints prints the endpoints f selects, at most most (0: all), a page at a time.
func listEndpoints(ctx context.Context, w io.Writer, conn *pgx.Conn, eps endpoints.Store, f endpoints.Filter, most int, asJSON bool) error {
	buf := bufio.NewWriterSize(w, 64<<10) // flushed after each page
	out := &endpointLister{w: buf, json: asJSON}
	n := 0
	for {
		f.Limit = listPage
		if most > 0 {
			f.Limit = min(listPage, most-n)
		}
		page, err := eps.List(ctx, conn, f)
		if err != nil {
			return endpointError(err, "")
		}
		if err := out.page(page); err != nil {
			return err
		}
		if err := buf.Flush(); err != nil {
			return err
		}
		n += len(page)
		if len(page) < f.Limit || (most > 0 && n >= most) {
			if err := out.end(); err != nil {
				return err
			}
			return buf.Flush()
		}
		f.After = page[len(page)-1].ID
	}
}

// endpointLister prints pages: a table (a header, then each page aligned by itself) or one
// JSON array written element by element.
type endpointLister struct {
	w     io.Writer
	json  bool
	count int
}

func (l *endpointLister) page(page []endpoints.Endpoint) error {
	if l.json {
		for _, e := range page {
			b, err := json.Marshal(toJSON(e))
			if err != nil {
				return err
			}
			sep := ",\n"
			if l.count == 0 {
				sep = "[\n"
			}
			if _, err := fmt.Fprintf(l.w, "%s%s", sep, b); err != nil {
				return err
			}
			l.count++
		}
		return nil
	}
	tw := tabwriter.NewWriter(l.w, 0, 4, 2, ' ', 0)
	if l.count == 0 && len(page) > 0 {
		fmt.Fprintln(tw, "ID\tSTATE\tTENANT\tEVENT TYPES\tAGGREGATE TYPES\tSCHEME\tFORMAT\tSECRETS\tURL")
	}
	for _, e := range page {
		var fps []string
		for _, s := range e.Secrets {
			fps = append(fps, or(s.Fingerprint, "?"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.State, or(e.TenantID, "-"),
			oneLine(strings.Join(e.EventTypes, ","), 40), oneLine(or(strings.Join(e.AggregateTypes, ","), "*"), 40),
			e.Scheme, or(e.Format, "raw"), strings.Join(fps, ","), e.URL)
		l.count++
	}
	return tw.Flush()
}

func (l *endpointLister) end() error {
	switch {
	case l.json && l.count == 0:
		_, err := fmt.Fprintln(l.w, "[]")
		return err
	case l.json:
		_, err := fmt.Fprintln(l.w, "\n]")
		return err
	case l.count == 0:
		_, err := fmt.Fprintln(l.w, "no endpoints")
		return err
	}
	return nil
}

func newEndpointShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "show ID",
		Short:   "Show one endpoint (its secrets as fingerprints)",
		Example: `  outbox-relay endpoint show acme --json`,
		Args:    oneID,
	}
	addEndpointCommon(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			e, err := eps.Get(ctx, conn, args[0])
			if err != nil {
				return endpointError(err, args[0])
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), toJSON(e))
			}
			printEndpoint(cmd.OutOrStdout(), e)
			return nil
		})
	}
	return cmd
}
