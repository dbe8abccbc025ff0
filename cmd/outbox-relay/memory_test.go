package main

import (
	"runtime/debug"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay"
)

// The soft memory limit run sets is above the heap that its pipelines' full buffers take: about
// 1.2 bytes per buffered byte plus some 20 MiB (docs/operations/starting.md, Memory; `outbox-bench memory`). Below
// that, the GC runs back to back and frees nothing: the fixed 64 MiB limit measured 24 cycles a
// second and a fifth of a core with four pipelines' buffers full (this test failed on it: "soft
// limit 64 MiB below ... 128 MiB of buffers"). GOMEMLIMIT, when set, is left alone.
func TestSoftMemoryLimitCoversFullBuffers(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	gogc := debug.SetGCPercent(100)
	debug.SetGCPercent(gogc)
	defer debug.SetGCPercent(gogc)
	t.Setenv("GOGC", "")
	hook := func(name string, bytes int, shards int) relay.Pipeline {
		return relay.Pipeline{Name: name, WebhookURL: "http://127.0.0.1:1/hook", Secrets: []string{"s"},
			MaxBufferedBytes: bytes, Shards: shards}
	}
	four := []relay.Pipeline{hook("a", 0, 0), hook("b", 0, 0), hook("c", 0, 0), hook("d", 0, 0)}
	for _, tc := range []struct {
		name  string
		cfg   relay.Config
		bound int64
	}{
		{"the flag path's pipeline", relay.Config{WebhookURL: "http://127.0.0.1:1/hook", Secrets: []string{"s"}}, 32 << 20},
		{"four pipelines", relay.Config{Pipelines: four}, 128 << 20},
		{"three shards of 64 MiB", relay.Config{Pipelines: []relay.Pipeline{hook("s", 64<<20, 3)}}, 192 << 20},
		{"--shard 1 of those", relay.Config{Pipelines: []relay.Pipeline{hook("s", 64<<20, 3)}, Shard: ptr(1)}, 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", "")
			tuneGC(tc.cfg, zerolog.Nop())
			limit := debug.SetMemoryLimit(-1)
			if heap := tc.bound*3/2 + 32<<20; limit < heap {
				t.Fatalf("soft limit %d MiB below 1.5 × the pipelines' %d MiB of buffers + 32 MiB (%d MiB)",
					limit>>20, tc.bound>>20, heap>>20)
			}
			t.Logf("%d MiB of buffers: soft limit %d MiB", tc.bound>>20, limit>>20)
		})
	}
	t.Run("GOMEMLIMIT set", func(t *testing.T) {
		debug.SetMemoryLimit(123 << 20)
		t.Setenv("GOMEMLIMIT", "123MiB")
		tuneGC(relay.Config{Pipelines: four}, zerolog.Nop())
		if got := debug.SetMemoryLimit(-1); got != 123<<20 {
			t.Fatalf("soft limit %d MiB with GOMEMLIMIT=123MiB, want it left alone", got>>20)
		}
	})
}

func ptr[T any](v T) *T { return &v }
