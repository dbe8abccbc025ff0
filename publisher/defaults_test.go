package publisher

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// A library caller's zero values mean what the CLI's and the pipelines file's defaults mean:
// a batch lingers 5ms, MaxAttempts 0 is about a day of retries (5 for a shadow), and only a
// negative value retries forever or sends at once.
func TestZeroValuesAreTheSettingsDefaults(t *testing.T) {
	var c Config
	c.Batch.MaxEvents = 10
	c.defaults()
	if c.Batch.Linger != settings.BatchLinger || c.Batch.MaxBytes != settings.BatchMaxBytes {
		t.Errorf("zero batch linger and max bytes = %s, %d; want %s, %d (as --batch-linger, --batch-max-bytes)",
			c.Batch.Linger, c.Batch.MaxBytes, settings.BatchLinger, settings.BatchMaxBytes)
	}
	if want := settings.AttemptsForADay(settings.RetryMin, settings.RetryMax); c.MaxAttempts != want || want < 100 {
		t.Errorf("zero MaxAttempts = %d; want about a day of retries, %d (as --max-attempts 0)", c.MaxAttempts, want)
	}
	for _, tc := range []struct {
		name string
		in   Config
		want Config
	}{
		{"shadow", Config{Shadow: true}, Config{MaxAttempts: settings.ShadowMaxAttempts}},
		{"forever", Config{MaxAttempts: -1}, Config{MaxAttempts: -1}},
		{"no linger", Config{Batch: Batch{Linger: NoLinger}}, Config{Batch: Batch{Linger: NoLinger}}},
	} {
		tc.in.defaults()
		if tc.in.MaxAttempts != tc.want.MaxAttempts && tc.want.MaxAttempts != 0 || tc.want.Batch.Linger != 0 && tc.in.Batch.Linger != tc.want.Batch.Linger {
			t.Errorf("%s: MaxAttempts %d, linger %s", tc.name, tc.in.MaxAttempts, tc.in.Batch.Linger)
		}
	}
}
