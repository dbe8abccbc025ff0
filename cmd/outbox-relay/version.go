package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set at build time with -ldflags "-X main.version=... -X main.commit=...";
// otherwise they come from the module's build info.
var (
	version = ""
	commit  = ""
)

func buildInfo() (ver, rev, goVer string) {
	ver, rev = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" {
			ver = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
			}
		}
	}
	if ver == "" || ver == "(devel)" {
		ver = "dev"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev, runtime.Version()
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, commit and Go version",
		Example: "  outbox-relay version",
		Run: func(cmd *cobra.Command, _ []string) {
			v, c, g := buildInfo()
			fmt.Fprintf(cmd.OutOrStdout(), "outbox-relay %s commit %s %s\n", v, c, g)
		},
	}
}
