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
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// The consumer runs on an empty database (it installs its tables) until cancelled.
func TestRunServesUntilCancelled(t *testing.T) {
	dsn := pgtest.NewDB(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{dsn: dsn, listen: addr, secrets: []string{"s"}, retention: 72 * time.Hour}, zerolog.Nop())
	}()
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

// A retention inside the relay's retry horizon is refused at start, naming it.
func TestRunRefusesAShortRetention(t *testing.T) {
	err := run(context.Background(), config{dsn: pgtest.NewDB(t), listen: "127.0.0.1:0", secrets: []string{"s"}, retention: time.Hour},
		zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "retry horizon") {
		t.Fatalf("run with --retention 1h: %v", err)
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
