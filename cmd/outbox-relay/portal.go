package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/portal"
)

var portalFrameFlag = envFlag{name: "portal-frame-ancestors", env: "OUTBOX_RELAY_PORTAL_FRAME_ANCESTORS"}

// addPortalFlags adds the portal's flags, of run and api alike.
func addPortalFlags(fs *pflag.FlagSet) {
	addSetting(fs, "portal")
	addSetting(fs, "portal-session-ttl")
	addSetting(fs, portalFrameFlag.name)
}

// mountPortal serves the partner portal and the operator console on mux beside the API h,
// unless --portal=false.
func mountPortal(mux *http.ServeMux, fs *pflag.FlagSet, h *api.API, acfg api.Config, log zerolog.Logger) error {
	if on, _ := fs.GetBool("portal"); !on {
		return nil
	}
	ttl, _ := fs.GetDuration("portal-session-ttl")
	p, err := portal.New(portal.Config{API: h, Pool: acfg.Pool, Schema: acfg.Schema, SigningKeys: acfg.SigningKeys,
		SessionTTL: ttl, FrameAncestors: strings.Fields(stringFrom(fs, portalFrameFlag)), Logger: log})
	if err != nil {
		return usageError{fmt.Errorf("--portal-session-ttl or --portal-frame-ancestors: %s",
			strings.TrimPrefix(err.Error(), "portal: bad config: "))}
	}
	mux.Handle("/portal/", p)
	mux.Handle("/console/", p)
	return nil
}

func newPortalLinkCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "portal-link --tenant ID --base-url URL [--ttl 15m]",
		Short: "Print a link that signs a customer in to the partner portal",
		Long: `Prints a portal link: --base-url followed by /portal/sign-in?token=TOKEN, the token signed with
the first key of --api-signing-key-file (or OUTBOX_RELAY_API_SIGNING_KEY), the keys of tenant
tokens, with an audience of its own (a link is no API token, an API token no link). Opened once
within --ttl, it signs its browser in to that tenant's pages for --portal-session-ttl of the
server, and the token leaves the address bar. A link opens one session only: give it to the
customer at once (redirect them to it), do not mail it. An application makes the same link with
portal.Link (docs/guides/portal.md).`,
		Example: `  OUTBOX_RELAY_API_SIGNING_KEY_FILE=/run/secrets/api-signing-key \
  outbox-relay portal-link --tenant acme --ttl 15m --base-url https://app.example`,
	}
	fs := cmd.Flags()
	fs.String("tenant", "", "the tenant the link signs in (outbox.Event.TenantID); required")
	fs.String("base-url", "", "where the customer's browser reaches the portal: the API's address, with the path prefix it is mounted under, e.g. https://app.example; required")
	fs.Duration("ttl", portal.DefaultLinkTTL, "how long the link can be opened (1s to 24h); the session it opens lasts longer")
	fs.Bool("json", false, "print {url, tenant, expires_at}")
	addSetting(fs, apiKeyFileFlag.name)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		tenant, _ := fs.GetString("tenant")
		base, _ := fs.GetString("base-url")
		ttl, _ := fs.GetDuration("ttl")
		switch {
		case tenant == "":
			return usageError{errors.New("--tenant is required: the id your application gives that customer (outbox.Event.TenantID)")}
		case base == "":
			return usageError{errors.New("--base-url is required: the address the customer's browser reaches the portal at, e.g. https://app.example")}
		}
		keys, err := readSigningKeys(fs)
		if err != nil {
			return err
		}
		if keys == nil {
			return usageError{errors.New("no signing key: set --api-signing-key-file or OUTBOX_RELAY_API_SIGNING_KEY " +
				"(the keys of tenant tokens, which the API verifies links with)")}
		}
		link, err := portal.Link(keys, portal.LinkOptions{Tenant: tenant, TTL: ttl, BaseURL: base})
		if err != nil {
			return usageError{errors.New(strings.TrimPrefix(err.Error(), "portal: "))}
		}
		if asJSON, _ := fs.GetBool("json"); asJSON {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"url": link, "tenant": tenant,
				"expires_at": time.Now().Add(ttl).UTC().Truncate(time.Second)})
		}
		fmt.Fprintln(cmd.OutOrStdout(), link)
		return nil
	}
	return cmd
}
