package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The egress settings reach relay.Config from flags, from their variables (a flag wins), and
// from the --config file's egress section (a flag or variable wins); bad values are usage
// errors naming the fix.
func TestEgressSettings(t *testing.T) {
	t.Setenv(dsnFlag.env, "postgres://relay@127.0.0.1:1/app")
	cfgOf := func(args ...string) (egressView, error) {
		cmd := newRunCmd()
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		fs := cmd.Flags()
		if path, _ := fs.GetString("config"); path != "" {
			cfg, _, err := fileConfig(fs, path)
			return egressView{cfg.Egress.DenyPrivate, cfg.Egress.HTTPSOnly, cfg.Egress.Allow, cfg.EgressProxy}, err
		}
		cfg, err := runConfig(fs)
		return egressView{cfg.Egress.DenyPrivate, cfg.Egress.HTTPSOnly, cfg.Egress.Allow, cfg.EgressProxy}, err
	}
	got, err := cfgOf("--endpoints", "--egress-deny-private", "--egress-allow", "10.20.0.0/16", "--egress-allow", "192.168.1.7",
		"--egress-https-only", "--egress-proxy", "http://proxy:3128")
	if err != nil || !got.deny || !got.https || got.proxy != "http://proxy:3128" ||
		!slices.Equal(got.allow, []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("192.168.1.7/32")}) {
		t.Fatalf("flags: %+v, %v", got, err)
	}
	t.Setenv(egressDenyFlag.env, "true")
	t.Setenv(egressAllowFlag.env, "10.1.0.0/16, 10.2.0.0/16")
	if got, err := cfgOf("--endpoints"); err != nil || !got.deny || len(got.allow) != 2 {
		t.Fatalf("variables: %+v, %v", got, err)
	}
	if got, err := cfgOf("--endpoints", "--egress-deny-private=false"); err != nil || got.deny {
		t.Fatalf("a flag over its variable: %+v, %v", got, err)
	}
	for _, tt := range []struct{ env, value, reason string }{
		{egressDenyFlag.env, "yes please", "set true or false"},
		{egressAllowFlag.env, "10.0.0.0/33", "give a CIDR range"},
		{egressAllowFlag.env, "0.0.0.0/0", "admits every address"},
	} {
		t.Setenv(tt.env, tt.value)
		if _, err := cfgOf("--endpoints"); err == nil || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("%s=%q: %v, want %q", tt.env, tt.value, err, tt.reason)
		}
		t.Setenv(egressDenyFlag.env, "true")
		t.Setenv(egressAllowFlag.env, "10.1.0.0/16")
	}

	file := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(file, []byte("egress:\n  deny_private: false\n  allow: [172.20.0.0/16]\n  https_only: true\n  proxy: http://p:3128\n"+
		"pipelines:\n  - name: p\n    endpoints: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = cfgOf("--config", file)
	if err != nil || !got.deny || !got.https || got.proxy != "http://p:3128" || len(got.allow) != 1 || got.allow[0].String() != "10.1.0.0/16" {
		t.Fatalf("the file under variables: %+v, %v (the variables win for deny_private and allow)", got, err)
	}
	os.Unsetenv(egressDenyFlag.env)
	os.Unsetenv(egressAllowFlag.env)
	if got, err = cfgOf("--config", file); err != nil || got.deny || got.allow[0].String() != "172.20.0.0/16" {
		t.Fatalf("the file alone: %+v, %v", got, err)
	}
}

type egressView struct {
	deny, https bool
	allow       []netip.Prefix
	proxy       string
}
