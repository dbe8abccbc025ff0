package settings

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Reference is docs/reference/configuration.md: every setting of Run in one table (flag, env,
// YAML key, default, meaning).
func Reference() string {
	var b strings.Builder
	b.WriteString(generated + "\n# Configuration reference: `outbox-relay run`\n\n" +
		"Every setting of `outbox-relay run`: its flag, the environment variable the flag falls back to, its key in a\n" +
		"pipeline of the `--config` file (see [Pipelines](../guides/pipelines.md); `dsn` and `schema` sit at the file's top), its default and\n" +
		"what it means. Flags override environment variables. The Go configs (`relay.Config`, `relay.Pipeline`) take the\n" +
		"same defaults for their zero values. A flag without a YAML key is a setting of the process, given on the command\n" +
		"line with or without `--config`; with `--config` the per-pipeline flags are refused.\n\n" +
		"| flag | env | YAML key | default | meaning |\n|---|---|---|---|---|\n")
	for _, s := range Run {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code("--", s.Flag), code("", s.Env), code("", s.YAML), s.shown(), s.Meaning)
	}
	return b.String()
}

// RunTable is docs/reference/commands.md's table of `outbox-relay run` flags (flag, env, default, meaning).
func RunTable() string {
	var b strings.Builder
	b.WriteString("| flag | env | default | meaning |\n|---|---|---|---|\n")
	for _, s := range Run {
		if s.Flag != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code("--", s.Flag), code("", s.Env), s.shown(), s.Meaning)
		}
	}
	return b.String()
}

// generated heads every generated text.
const generated = "<!-- Generated from internal/settings (settings.Run); do not edit. " +
	"Regenerate: go test ./cmd/outbox-relay -run TestConfigurationReference -update -->"

func code(prefix, s string) string {
	if s == "" {
		return ""
	}
	return "`" + prefix + s + "`"
}

// shown is the default as the reference shows it.
func (s Setting) shown() string {
	if s.Shown != "" {
		return s.Shown
	}
	if s.Default == nil {
		return ""
	}
	if v := Show(s.Default); v != "" {
		return "`" + v + "`"
	}
	return ""
}

// Show writes a default as a user types it: 10m, 5ms, 0, 64, true.
func Show(v any) string {
	switch v := v.(type) {
	case time.Duration:
		if v == 0 {
			return "0"
		}
		switch {
		case v%time.Hour == 0:
			return fmt.Sprintf("%dh", v/time.Hour)
		case v%time.Minute == 0:
			return fmt.Sprintf("%dm", v/time.Minute)
		}
		return v.String()
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case string:
		return v
	}
	return fmt.Sprint(v)
}
