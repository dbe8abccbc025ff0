package inbox_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cloudevents"
	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

// ceEvent is an event as the relay would encode it for the CloudEvents formats.
func ceEvent(aggregateID string, n int) cloudevents.Event {
	return cloudevents.Event{
		ID:            uuid.NewString(),
		Source:        cloudevents.DefaultSource("default"),
		Type:          "order.created",
		AggregateType: "order",
		AggregateID:   aggregateID,
		Time:          time.Date(2026, 11, 30, 19, 40, 0, n*1000, time.UTC),
		Sequence:      "0000000001538A30-" + strconv.Itoa(10000000 + n)[1:],
		TraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Data:          []byte(`{"n":` + strconv.Itoa(n) + `}`),
	}
}

// signed returns h with the signature headers of scheme over body, the way the relay signs:
// under Standard Webhooks with webhook-id id.
func signed(t testing.TB, h http.Header, scheme signature.Scheme, secrets []string, id string, body []byte) http.Header {
	t.Helper()
	keys, err := signature.Keys(scheme, secrets)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().Unix()
	if scheme == signature.StandardWebhooks {
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", string(signature.AppendStandard(nil, keys, id, ts, body)))
		return h
	}
	h.Set("X-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Signature", string(signature.AppendX(nil, keys, ts, body)))
	return h
}

// batchRequest is a batch-mode request, signed under scheme; under Standard Webhooks its
// webhook-id is cloudevents.BatchID of the ids.
func batchRequest(t testing.TB, scheme signature.Scheme, secrets []string, evs ...cloudevents.Event) (http.Header, []byte) {
	t.Helper()
	body, err := cloudevents.AppendBatch(nil, evs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(evs))
	for i := range evs {
		ids[i] = evs[i].ID
	}
	h := http.Header{}
	h.Set("Content-Type", cloudevents.ContentTypeBatch)
	h.Set("X-Attempt", "1")
	return signed(t, h, scheme, secrets, cloudevents.BatchID(ids), body), body
}

func binaryRequest(t testing.TB, scheme signature.Scheme, secrets []string, ev cloudevents.Event) (http.Header, []byte) {
	t.Helper()
	h := http.Header{}
	if err := cloudevents.BinaryHeaders(&ev, h.Add); err != nil {
		t.Fatal(err)
	}
	h.Set("X-Attempt", "1")
	return signed(t, h, scheme, secrets, ev.ID, ev.Data), ev.Data
}

// seen records the events a ProcessFunc was called with, in order.
type seen struct {
	mu  sync.Mutex
	evs []inbox.Event
}

func (s *seen) process(fail func(inbox.Event) error) inbox.ProcessFunc {
	return func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if fail != nil {
			if err := fail(ev); err != nil {
				return err
			}
		}
		if err := recordEffect(ctx, tx, ev); err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.evs = append(s.evs, ev)
		return nil
	}
}

func (s *seen) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.evs))
	for i, ev := range s.evs {
		out[i] = ev.ID.String()
	}
	return out
}

func equalIDs(t *testing.T, what string, got []string, want ...cloudevents.Event) {
	t.Helper()
	w := make([]string, len(want))
	for i := range want {
		w[i] = want[i].ID
	}
	if len(got) != len(w) {
		t.Fatalf("%s: %d events %v, want %v", what, len(got), got, w)
	}
	for i := range w {
		if got[i] != w[i] {
			t.Fatalf("%s: %v, want %v", what, got, w)
		}
	}
}

func (e env) effectsOf(t *testing.T, id string) int {
	return e.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, id)
}

func TestBinaryModeDelivery(t *testing.T) {
	for _, scheme := range []signature.Scheme{signature.XSignature, signature.StandardWebhooks} {
		t.Run(scheme.String(), func(t *testing.T) {
			e := newEnv(t)
			var s seen
			secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
			_, url := e.serve(t, secrets, s.process(nil), inbox.Config{})
			ev := ceEvent("42", 7)
			h, body := binaryRequest(t, scheme, secrets, ev)
			if resp := send(t, http.MethodPost, url, h, body); resp.StatusCode != http.StatusOK {
				t.Fatalf("binary mode: %s", resp.Status)
			}
			if resp := send(t, http.MethodPost, url, h, body); resp.StatusCode != http.StatusOK || resp.Header.Get(inbox.HeaderDuplicate) != "true" {
				t.Fatalf("redelivery: %s duplicate=%q", resp.Status, resp.Header.Get(inbox.HeaderDuplicate))
			}
			if len(s.evs) != 1 || e.effectsOf(t, ev.ID) != 1 {
				t.Fatalf("applied %d times", len(s.evs))
			}
			got := s.evs[0]
			if got.ID.String() != ev.ID || got.Type != ev.Type || got.AggregateType != "order" || got.AggregateID != "42" ||
				got.Sequence != ev.Sequence || got.Source != ev.Source || !got.Time.Equal(ev.Time) ||
				string(got.Payload) != string(ev.Data) || got.Attempt != 1 || got.Timestamp.IsZero() {
				t.Fatalf("ProcessFunc saw %+v, sent %+v", got, ev)
			}
		})
	}
}

func TestBatchIsAppliedOnceInOrder(t *testing.T) {
	for _, scheme := range []signature.Scheme{signature.XSignature, signature.StandardWebhooks} {
		t.Run(scheme.String(), func(t *testing.T) {
			e := newEnv(t)
			var s seen
			secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
			h, url := e.serve(t, secrets, s.process(nil), inbox.Config{})
			evs := []cloudevents.Event{ceEvent("1", 1), ceEvent("1", 2), ceEvent("2", 3)}
			hd, body := batchRequest(t, scheme, secrets, evs...)
			resp := send(t, http.MethodPost, url, hd, body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(inbox.HeaderDuplicate) != "" {
				t.Fatalf("batch: %s duplicate=%q", resp.Status, resp.Header.Get(inbox.HeaderDuplicate))
			}
			equalIDs(t, "applied", s.ids(), evs...)
			for i, got := range s.evs {
				if got.Sequence != evs[i].Sequence || string(got.Payload) != string(evs[i].Data) || got.AggregateID != evs[i].AggregateID {
					t.Fatalf("event %d: ProcessFunc saw %+v", i, got)
				}
			}
			// The relay's retry of the same batch: every event absorbed, nothing applied again.
			hd, body = batchRequest(t, scheme, secrets, evs...)
			resp = send(t, http.MethodPost, url, hd, body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(inbox.HeaderDuplicate) != "true" {
				t.Fatalf("retried batch: %s duplicate=%q", resp.Status, resp.Header.Get(inbox.HeaderDuplicate))
			}
			if n := e.effects(t); n != 3 || len(s.ids()) != 3 {
				t.Fatalf("%d effects after the retry, want 3", n)
			}
			if n := e.count(t, `SELECT count(*) FROM inbox_events WHERE handler_status = 'done' AND processed_at IS NOT NULL`); n != 3 {
				t.Fatalf("%d inbox rows done, want 3", n)
			}
			if st := h.Stats(); st != (inbox.Stats{Processed: 3, Duplicates: 3}) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestBatchRepeatingSeenEvents: a batch that holds events the inbox has recorded (from a single
// delivery and from an earlier batch) applies only the new ones, once, and answers 200.
func TestBatchRepeatingSeenEvents(t *testing.T) {
	e := newEnv(t)
	var s seen
	secrets := []string{"topsecret"}
	h, url := e.serve(t, secrets, s.process(nil), inbox.Config{})
	a, b, c, d, x := ceEvent("1", 1), ceEvent("1", 2), ceEvent("1", 3), ceEvent("2", 4), ceEvent("2", 5)
	hd, body := binaryRequest(t, signature.XSignature, secrets, a)
	if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("single: %s", resp.Status)
	}
	hd, body = batchRequest(t, signature.XSignature, secrets, b, x)
	if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("first batch: %s", resp.Status)
	}
	// Old, new, old, new, and a repeat of a new one within the batch.
	hd, body = batchRequest(t, signature.XSignature, secrets, a, c, b, d, c)
	resp := send(t, http.MethodPost, url, hd, body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(inbox.HeaderDuplicate) != "" {
		t.Fatalf("mixed batch: %s duplicate=%q", resp.Status, resp.Header.Get(inbox.HeaderDuplicate))
	}
	equalIDs(t, "applied", s.ids(), a, b, x, c, d)
	for _, ev := range []cloudevents.Event{a, b, c, d, x} {
		if n := e.effectsOf(t, ev.ID); n != 1 {
			t.Fatalf("event %s applied %d times", ev.ID, n)
		}
	}
	if st := h.Stats(); st.Processed != 5 || st.Duplicates != 3 {
		t.Fatalf("stats %+v, want 5 processed and 3 duplicates (a, b, and c's repeat)", st)
	}
}

// TestBatchFailureRollsBackTheWholeBatch: one event's ProcessFunc failing (or panicking) undoes
// every event of the batch, the earlier ones' effects included, and answers 500; the same
// batch then succeeds once the ProcessFunc does.
func TestBatchFailureRollsBackTheWholeBatch(t *testing.T) {
	for _, mode := range []string{"error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			var s seen
			secrets := []string{"topsecret"}
			old := ceEvent("0", 0)
			evs := []cloudevents.Event{ceEvent("1", 1), old, ceEvent("1", 2), ceEvent("2", 3)}
			var broken sync.Mutex
			poisoned := true
			fail := func(ev inbox.Event) error {
				broken.Lock()
				defer broken.Unlock()
				if poisoned && ev.ID.String() == evs[2].ID {
					if mode == "panic" {
						panic("boom")
					}
					return errors.New("boom")
				}
				return nil
			}
			h, url := e.serve(t, secrets, s.process(fail), inbox.Config{})
			hd, body := binaryRequest(t, signature.XSignature, secrets, old)
			if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusOK {
				t.Fatalf("old event: %s", resp.Status)
			}
			hd, body = batchRequest(t, signature.XSignature, secrets, evs...)
			if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusInternalServerError {
				t.Fatalf("batch with a failing event: %s, want 500", resp.Status)
			}
			// evs[0] was applied before evs[2] failed: its effect and inbox row are gone too.
			if rows, fx := e.inboxRows(t), e.effects(t); rows != 1 || fx != 1 {
				t.Fatalf("after the failed batch: %d inbox rows and %d effects, want only the old event's 1 and 1", rows, fx)
			}
			if st := h.Stats(); st.Failed != 1 || st.Processed != 1 {
				t.Fatalf("stats %+v", st)
			}
			broken.Lock()
			poisoned = false
			broken.Unlock()
			if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusOK {
				t.Fatalf("retry once the handler works: %s", resp.Status)
			}
			for _, ev := range evs {
				if n := e.effectsOf(t, ev.ID); n != 1 {
					t.Fatalf("event %s applied %d times", ev.ID, n)
				}
			}
			if rows := e.inboxRows(t); rows != 4 {
				t.Fatalf("%d inbox rows, want 4", rows)
			}
		})
	}
}

// TestBatchSignature: the signature covers the exact batch body, and under Standard Webhooks
// the webhook-id must be the batch's BatchID.
func TestBatchSignature(t *testing.T) {
	e := newEnv(t)
	var s seen
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	_, url := e.serve(t, secrets, s.process(nil), inbox.Config{})
	evs := []cloudevents.Event{ceEvent("1", 1), ceEvent("1", 2)}
	for _, scheme := range []signature.Scheme{signature.XSignature, signature.StandardWebhooks} {
		hd, body := batchRequest(t, scheme, secrets, evs...)
		tampered := bytes.Replace(body, []byte(`{"n":2}`), []byte(`{"n":9}`), 1)
		if bytes.Equal(tampered, body) {
			t.Fatal("test did not tamper")
		}
		if resp := send(t, http.MethodPost, url, hd, tampered); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: tampered batch: %s, want 401", scheme, resp.Status)
		}
		hd.Set("X-Signature", "sha256=00")
		hd.Set("webhook-signature", "v1,AAAA")
		if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: wrong signature: %s, want 401", scheme, resp.Status)
		}
	}
	// A genuine Standard Webhooks signature, but webhook-id is not the batch's id.
	body, _ := cloudevents.AppendBatch(nil, evs)
	hd := http.Header{}
	hd.Set("Content-Type", cloudevents.ContentTypeBatch)
	signed(t, hd, signature.StandardWebhooks, secrets, evs[0].ID, body)
	if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("batch with an event's id as webhook-id: %s, want 400", resp.Status)
	}
	if rows := e.inboxRows(t); rows != 0 || len(s.ids()) != 0 {
		t.Fatalf("refused batches left %d rows", rows)
	}
	// Positive control: the same batch, properly signed, goes through.
	hd, body = batchRequest(t, signature.StandardWebhooks, secrets, evs...)
	if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("genuine batch: %s", resp.Status)
	}
	equalIDs(t, "applied", s.ids(), evs...)
}

func TestBatchRefusals(t *testing.T) {
	e := newEnv(t)
	var s seen
	secrets := []string{"topsecret"}
	_, url := e.serve(t, secrets, s.process(nil), inbox.Config{})
	notUUID := ceEvent("1", 1)
	notUUID.ID = "evt-1"
	noData := ceEvent("1", 2)
	noData.Data = nil
	for name, evs := range map[string][]cloudevents.Event{
		"empty":        nil,
		"id not uuid":  {ceEvent("1", 0), notUUID},
		"no data":      {noData},
		"jsonb refuse": {func() cloudevents.Event { ev := ceEvent("1", 3); ev.Data = []byte(`{"s":"\u0000"}`); return ev }()},
	} {
		hd, body := batchRequest(t, signature.XSignature, secrets, evs...)
		if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s, want 400", name, resp.Status)
		}
	}
	body := []byte(`{"specversion":"1.0"}`)
	hd := signed(t, http.Header{"Content-Type": {"application/cloudevents+json"}}, signature.XSignature, secrets, "", body)
	if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("structured single event: %s, want 415", resp.Status)
	}
	if rows := e.inboxRows(t); rows != 0 {
		t.Fatalf("refused batches left %d rows", rows)
	}
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGzipBodies: a gzip Content-Encoding is undone, whether the signature covers the body as
// sent or as decompressed; the decompressed size is bounded.
func TestGzipBodies(t *testing.T) {
	e := newEnv(t)
	var s seen
	secrets := []string{"topsecret"}
	_, url := e.serve(t, secrets, s.process(nil), inbox.Config{MaxBodyBytes: 4096})
	a, b := ceEvent("1", 1), ceEvent("1", 2)

	// Signed over the compressed bytes.
	_, plain := batchRequest(t, signature.XSignature, secrets, a)
	zipped := gzipped(t, plain)
	hd := http.Header{"Content-Type": {cloudevents.ContentTypeBatch}, "Content-Encoding": {"gzip"}}
	signed(t, hd, signature.XSignature, secrets, "", zipped)
	if resp := send(t, http.MethodPost, url, hd, zipped); resp.StatusCode != http.StatusOK {
		t.Fatalf("gzip, signed as sent: %s", resp.Status)
	}
	// Signed over the decompressed bytes.
	hd, plain = batchRequest(t, signature.XSignature, secrets, b)
	hd.Set("Content-Encoding", "gzip")
	if resp := send(t, http.MethodPost, url, hd, gzipped(t, plain)); resp.StatusCode != http.StatusOK {
		t.Fatalf("gzip, signed decompressed: %s", resp.Status)
	}
	equalIDs(t, "applied", s.ids(), a, b)

	// A small body that decompresses past MaxBodyBytes, genuinely signed either way.
	big := ceEvent("1", 3)
	big.Data = []byte(`{"pad":"` + string(bytes.Repeat([]byte("x"), 8192)) + `"}`)
	_, plain = batchRequest(t, signature.XSignature, secrets, big)
	bomb := gzipped(t, plain)
	if len(bomb) > 4096 {
		t.Fatalf("bomb is %d bytes compressed", len(bomb))
	}
	for _, signedBody := range [][]byte{bomb, plain} {
		hd := http.Header{"Content-Type": {cloudevents.ContentTypeBatch}, "Content-Encoding": {"gzip"}}
		signed(t, hd, signature.XSignature, secrets, "", signedBody)
		if resp := send(t, http.MethodPost, url, hd, bomb); resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("decompression past the limit: %s, want 413", resp.Status)
		}
	}
	// Genuinely signed, but not gzip.
	notGzip := []byte(`[]`)
	hd = http.Header{"Content-Type": {cloudevents.ContentTypeBatch}, "Content-Encoding": {"gzip"}}
	signed(t, hd, signature.XSignature, secrets, "", notGzip)
	if resp := send(t, http.MethodPost, url, hd, notGzip); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("signed non-gzip body: %s, want 400", resp.Status)
	}
	// Not signed at all: 401, whatever the body.
	hd.Set("X-Signature", "sha256=00")
	if resp := send(t, http.MethodPost, url, hd, notGzip); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned non-gzip body: %s, want 401", resp.Status)
	}
	hd, plain = batchRequest(t, signature.XSignature, secrets, ceEvent("1", 4))
	hd.Set("Content-Encoding", "br")
	if resp := send(t, http.MethodPost, url, hd, plain); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("Content-Encoding br: %s, want 415", resp.Status)
	}
	if n := e.inboxRows(t); n != 2 {
		t.Fatalf("%d inbox rows, want 2", n)
	}
}

// TestConcurrentOverlappingBatches: batches sharing events, sent at the same time in different
// orders (as a relay retrying after a lost answer could), apply each event exactly once, and
// none is answered 503: the ids are claimed in id order, so two batches cannot deadlock on
// each other's rows (claimed in batch order, 3 runs of this test met 6 deadlocks).
func TestConcurrentOverlappingBatches(t *testing.T) {
	e := newEnv(t)
	var s seen
	secrets := []string{"topsecret"}
	_, url := e.serve(t, secrets, s.process(nil), inbox.Config{})
	evs := make([]cloudevents.Event, 12)
	for i := range evs {
		evs[i] = ceEvent(strconv.Itoa(i%3), i)
	}
	const senders = 8
	var wg sync.WaitGroup
	errs := make(chan string, senders)
	for g := 0; g < senders; g++ {
		batch := make([]cloudevents.Event, 0, len(evs))
		for i := range evs {
			batch = append(batch, evs[(i*(g+1)+g)%len(evs)]) // a different order, and subset, per sender
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hd, body := batchRequest(t, signature.XSignature, secrets, batch...)
			if resp := send(t, http.MethodPost, url, hd, body); resp.StatusCode != http.StatusOK {
				errs <- resp.Status
			}
		}()
	}
	wg.Wait()
	close(errs)
	for st := range errs {
		t.Errorf("a batch was answered %s", st)
	}
	seenIDs := map[string]bool{}
	for _, id := range s.ids() {
		if seenIDs[id] {
			t.Fatalf("event %s applied twice", id)
		}
		seenIDs[id] = true
	}
	if n := e.effects(t); n != len(seenIDs) {
		t.Fatalf("%d effects, %d distinct events applied", n, len(seenIDs))
	}
	if e.inboxRows(t) != len(seenIDs) {
		t.Fatalf("%d inbox rows, %d events applied", e.inboxRows(t), len(seenIDs))
	}
}
