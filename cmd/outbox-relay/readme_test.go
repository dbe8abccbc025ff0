package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The README's configuration tables must list every flag of every command, so a new flag
// cannot ship undocumented.
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## Configuration")
	end := strings.Index(readme, "## The webhook contract")
	if start < 0 || end < start {
		t.Fatal("README has no Configuration section before the webhook contract")
	}
	config := readme[start:end]
	for _, cmd := range newRootCmd().Commands() {
		if cmd.Hidden || cmd.Name() == "help" {
			continue
		}
		if !strings.Contains(config, "`"+cmd.Name()+"`") && !strings.Contains(config, "outbox-relay "+cmd.Name()) {
			t.Errorf("README configuration does not mention the %s command", cmd.Name())
		}
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			if !strings.Contains(config, "`--"+f.Name+"`") {
				t.Errorf("README configuration lacks `--%s` (%s)", f.Name, cmd.Name())
			}
		})
	}
	for _, env := range []string{"DB_DSN", "WEBHOOK_URL", "WEBHOOK_SECRET", "WEBHOOK_SECRET_FILE"} {
		if !strings.Contains(config, "`"+env+"`") {
			t.Errorf("README configuration lacks %s", env)
		}
	}
}
