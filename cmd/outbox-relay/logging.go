package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
)

// Duration fields (duration, retry_in, retry, shutdown_timeout, ...) are logged as seconds, a
// decimal number, like the metrics' _seconds: `"retry_in":13.84`. zerolog's default is
// milliseconds with no unit in the name. These settings are process-wide, so they are made
// here, by the command, for every package's log lines; docs/reference/metrics.md, Logs says so.
func init() {
	zerolog.DurationFieldUnit = time.Second
	zerolog.DurationFieldInteger = false
}

func addLogFlags(fs *pflag.FlagSet) {
	addSetting(fs, "log-level")
	addSetting(fs, "log-format")
}

// newLogger builds the process logger from --log-level and --log-format, writing to w.
func newLogger(fs *pflag.FlagSet, w io.Writer) (zerolog.Logger, error) {
	levelName, _ := fs.GetString("log-level")
	level, err := zerolog.ParseLevel(levelName)
	if err != nil || levelName == "" {
		return zerolog.Nop(), usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", levelName)}
	}
	format, _ := fs.GetString("log-format")
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	case "auto":
		if isTerminal(w) {
			w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
		}
	default:
		return zerolog.Nop(), usageError{fmt.Errorf("--log-format %q: use json, console or auto", format)}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
