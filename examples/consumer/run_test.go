package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

func TestRunNeedsTheMigratedSchema(t *testing.T) {
	err := run(context.Background(), config{dsn: pgtest.NewDB(t), listen: "127.0.0.1:0", secrets: []string{"s"}}, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "outbox-relay migrate") {
		t.Fatalf("run on an unmigrated database: %v", err)
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	dsn := pgtest.NewDB(t)
	if _, err := migrations.Up(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, config{dsn: dsn, listen: addr, secrets: []string{"s"}}, zerolog.Nop()) }()
	waitReady(t, "http://"+addr+"/readyz", done)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitReady(t *testing.T, url string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("consumer never became ready")
}
