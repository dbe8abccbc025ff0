package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// addSetting registers the flag of the settings table's row name (internal/settings), with
// the row's default and help: a run flag has no default or help text of its own.
func addSetting(fs *pflag.FlagSet, name string) {
	s := settings.Lookup(name)
	switch d := s.Default.(type) {
	case string:
		fs.String(name, d, s.Help)
	case bool:
		fs.Bool(name, d, s.Help)
	case int:
		fs.Int(name, d, s.Help)
	case time.Duration:
		fs.Duration(name, d, s.Help)
	case []string:
		fs.StringArray(name, d, s.Help)
	default:
		panic(fmt.Sprintf("settings row --%s: default %T is not a flag type", name, s.Default))
	}
}
