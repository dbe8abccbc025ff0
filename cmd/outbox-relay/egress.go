package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The egress policy's flags: `run` applies them at every connection, `endpoint add/update` (and
// the API) when a URL is written; all read the same environment variables, so one setting in
// the environment of both keeps them in agreement.
var (
	egressDenyFlag  = envFlag{name: "egress-deny-private", env: "OUTBOX_RELAY_EGRESS_DENY_PRIVATE"}
	egressAllowFlag = envFlag{name: "egress-allow", env: "OUTBOX_RELAY_EGRESS_ALLOW"}
	egressHTTPSFlag = envFlag{name: "egress-https-only", env: "OUTBOX_RELAY_EGRESS_HTTPS_ONLY"}
	egressProxyFlag = envFlag{name: "egress-proxy", env: "OUTBOX_RELAY_EGRESS_PROXY"}
)

func addEgressPolicyFlags(fs *pflag.FlagSet) {
	addSetting(fs, egressDenyFlag.name)
	addSetting(fs, egressAllowFlag.name)
	addSetting(fs, egressHTTPSFlag.name)
}

// egressPolicy reads the policy flags (or their variables); a flag set explicitly wins over
// its variable.
func egressPolicy(fs *pflag.FlagSet) (endpoints.Egress, error) {
	var e endpoints.Egress
	var err error
	if e.DenyPrivate, err = boolFrom(fs, egressDenyFlag); err != nil {
		return e, err
	}
	if e.HTTPSOnly, err = boolFrom(fs, egressHTTPSFlag); err != nil {
		return e, err
	}
	ranges, _ := fs.GetStringArray(egressAllowFlag.name)
	if !fs.Changed(egressAllowFlag.name) {
		if v := os.Getenv(egressAllowFlag.env); v != "" {
			ranges = strings.Split(v, ",")
		}
	}
	e.Allow, err = parseRanges(ranges)
	return e, err
}

// parseRanges reads CIDR ranges (a bare address is its own /32 or /128).
func parseRanges(ranges []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, r := range ranges {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		p, err := netip.ParsePrefix(r)
		if err != nil {
			a, aerr := netip.ParseAddr(r)
			if aerr != nil {
				return nil, usageError{fmt.Errorf("--egress-allow %q (%s): give a CIDR range such as 10.20.0.0/16 or fd00:1::/64",
					r, egressAllowFlag.env)}
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Bits() == 0 {
			return nil, usageError{fmt.Errorf("--egress-allow %s admits every address: drop --egress-deny-private instead", r)}
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// boolFrom returns a boolean flag's value if it was given, else its variable's (true, false,
// 1, 0), else the default.
func boolFrom(fs *pflag.FlagSet, f envFlag) (bool, error) {
	v, _ := fs.GetBool(f.name)
	if fs.Changed(f.name) {
		return v, nil
	}
	if s, ok := os.LookupEnv(f.env); ok && s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return false, usageError{errors.New(f.env + "=" + strconv.Quote(s) + ": set true or false")}
		}
		return b, nil
	}
	return v, nil
}

// fileEgress applies the file's egress keys that no flag or variable sets.
func fileEgress(fs *pflag.FlagSet, cfg *relay.Config, e pipeconf.Egress) error {
	unset := func(f envFlag) bool { return !fs.Changed(f.name) && os.Getenv(f.env) == "" }
	if e.SetDenyPrivate && unset(egressDenyFlag) {
		cfg.Egress.DenyPrivate = e.DenyPrivate
	}
	if e.SetHTTPSOnly && unset(egressHTTPSFlag) {
		cfg.Egress.HTTPSOnly = e.HTTPSOnly
	}
	if e.Allow != nil && unset(egressAllowFlag) {
		var err error
		if cfg.Egress.Allow, err = parseRanges(e.Allow); err != nil {
			return err
		}
	}
	if e.Proxy != "" && unset(egressProxyFlag) {
		cfg.EgressProxy = e.Proxy
	}
	return nil
}
