package main

import (
	"context"
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
			tuneGC(context.Background(), tc.cfg, zerolog.Nop())()
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
		tuneGC(context.Background(), relay.Config{Pipelines: four}, zerolog.Nop())()
		if got := debug.SetMemoryLimit(-1); got != 123<<20 {
			t.Fatalf("soft limit %d MiB with GOMEMLIMIT=123MiB, want it left alone", got>>20)
		}
	})
}

// With partner endpoints the limit grows with their number: a relay of 10,000 endpoints once
// held about 118 MB live under the buffers' 96 MiB, and the GC took half of its CPU; each
// endpoint now holds about 3.5 KB live (its lane, its client and signer), and 7 KB more with a
// kept-alive https connection (docs/development/benchmarks-partners.md). The limit counts
// outbox_endpoints' rows at the start.
func TestSoftMemoryLimitCoversEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	gogc := debug.SetGCPercent(100)
	defer debug.SetGCPercent(gogc)
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	dsn, pool := migratedDB(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox_endpoints (id, url, secrets)
		SELECT 'ep-' || i, 'https://partner-' || i || '.example/hooks', jsonb_build_array(jsonb_build_object('secret', 'a-secret-of-sixteen-or-more'))
		FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	cfg := relay.Config{DSN: dsn, Pipelines: []relay.Pipeline{{Name: "endpoints", Endpoints: true}}}
	none, _ := relay.SoftMemoryLimit(cfg)
	tuneGC(context.Background(), cfg, zerolog.Nop())()
	limit := debug.SetMemoryLimit(-1)
	if live := int64(5000 * (3584 + 7168)); limit-none < live {
		t.Fatalf("soft limit %d MiB for 5,000 endpoints, %d MiB without them: below the %d MiB they hold live", limit>>20, none>>20, live>>20)
	}
	t.Logf("5,000 endpoints: soft limit %d MiB (%d MiB without them)", limit>>20, none>>20)
}

func ptr[T any](v T) *T { return &v }
