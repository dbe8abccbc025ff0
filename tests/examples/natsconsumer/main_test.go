// Package natsconsumer proves the example program examples/natsconsumer as a user runs it: the
// binary, built from the example's source, against a real JetStream server and PostgreSQL.
package natsconsumer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/tests/internal/natstest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// The same event stored twice in the stream is applied once; a different event is applied too;
// a message that is not a relay event is terminated, not redelivered forever.
func TestDuplicateAppliedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "natsconsumer")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin,
		"github.com/outbox-relay/outbox-relay/examples/natsconsumer").CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v: %s", err, out)
	}
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"}}); err != nil {
		t.Fatal(err)
	}
	a, b := uuid.NewString(), uuid.NewString()
	// Without Nats-Msg-Id both copies of a are stored, as after a relay crash outside the
	// stream's duplicate window. The last message is not a relay event. Each payload names its
	// event, so that the example's log of what it applied says which.
	for _, id := range []string{a, a, b, ""} {
		m := &nats.Msg{Subject: "outbox.order.order_created", Data: fmt.Appendf(nil, `{"event":%q}`, id), Header: nats.Header{}}
		if id != "" {
			m.Header.Set("X-Event-Id", id)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer's database: nothing of the relay; the example installs inbox_events itself.
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "DB_DSN="+pgtest.NewDB(t), "NATS_URL="+srv.URL())
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Wait until the consumer answered all four messages (acknowledged or terminated).
	waitFor := func() bool {
		c, err := js.Consumer(ctx, "OUTBOX", "warehouse")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream == 4
	}
	for !waitFor() {
		if ctx.Err() != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait() // stderr is whole once the process is reaped
			t.Fatalf("the consumer did not answer the four messages; it logged:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want 0; it logged:\n%s", err, stderr.String())
	}
	log := stderr.String()
	applied := func(id string) int { return strings.Count(log, fmt.Sprintf(`{"event":%q}`, id)) }
	if applied(a) != 1 || applied(b) != 1 || strings.Count(log, "not a relay event, terminated") != 1 {
		t.Fatalf("want each of the two events applied once and one message terminated; the example logged:\n%s", log)
	}
}
