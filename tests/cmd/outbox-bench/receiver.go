package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/signature"
)

// The receiver is the webhook endpoint every throughput row posts to. It runs as its own
// process (`outbox-bench receiver`), so the relay and the in-process ceiling client reach it
// the same way, and its CPU can be read from /proc on its own.
//
//	POST /hook       verify X-Signature, record the arrival of X-Event-Id (or of each event of a
//	                 CloudEvents batch); 200, or 401 if bad
//	POST /ep/{id}    the same for endpoint id of a pipeline with endpoints (endpoints.go): a
//	                 delivery is an (endpoint, event) pair, so the same event at two endpoints
//	                 is two deliveries, not a duplicate, and order is checked per endpoint
//	POST /slow/{id}  /ep/{id}, answered after slowAnswer (1 s): a slow partner (fanout.go)
//	POST /fail/{id}  a failing partner: verify, count the attempt, answer 500 (fanout.go)
//	GET  /failures   {"<endpoint id>": {"attempts": n, "events": distinct event ids}, ...}
//	GET  /stats      receiverStats as JSON
//	GET  /endpoints  {"<endpoint id>": <distinct deliveries>, ...}
//	GET  /arrivals   {"<event id>": <unix nanos of first arrival>, ...} (endpoints: "<id> <event id>")
//	POST /reset      forget everything (between rows)

// receiverStats is what GET /stats returns.
type receiverStats struct {
	Unique          int   `json:"unique"`   // distinct X-Event-Id accepted (endpoints: distinct deliveries)
	Requests        int64 `json:"requests"` // all requests to /hook (a batch is one)
	Duplicates      int64 `json:"duplicates"`
	BadSignatures   int64 `json:"bad_signatures"`
	OrderViolations int64 `json:"order_violations"` // a first delivery whose seq is below its aggregate's last
	BodyBytes       int64 `json:"body_bytes"`       // over accepted first deliveries
	FirstNanos      int64 `json:"first_nanos"`      // arrival of the first accepted request
	LastNanos       int64 `json:"last_nanos"`       // arrival of the last new event id
}

// receiver holds the state behind the endpoints.
type receiver struct {
	keys [][]byte

	mu          sync.Mutex
	stats       receiverStats
	arrivals    map[string]int64
	lastSeq     map[string]int64 // [endpoint ]aggregate type/id → seq of its latest first delivery
	perEndpoint map[string]int64 // endpoint id → distinct deliveries
	failures    map[string]*failures
}

// failures is what POST /fail/{id} saw of one endpoint.
type failures struct {
	Attempts int64 `json:"attempts"`
	Events   int   `json:"events"`
	ids      map[string]bool
}

// slowAnswer is how long /slow/{id} takes to answer.
const slowAnswer = time.Second

func newReceiver(secret string) *receiver {
	r := &receiver{keys: [][]byte{[]byte(secret)}}
	r.reset()
	return r
}

func (r *receiver) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats = receiverStats{}
	r.arrivals = map[string]int64{}
	r.lastSeq = map[string]int64{}
	r.perEndpoint = map[string]int64{}
	r.failures = map[string]*failures{}
}

func (r *receiver) snapshot() receiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Unique = len(r.arrivals)
	return s
}

func (r *receiver) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook", func(w http.ResponseWriter, req *http.Request) { r.hook(w, req, "") })
	mux.HandleFunc("POST /ep/{id}", func(w http.ResponseWriter, req *http.Request) { r.hook(w, req, req.PathValue("id")) })
	mux.HandleFunc("POST /slow/{id}", func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-time.After(slowAnswer):
			r.hook(w, req, req.PathValue("id"))
		case <-req.Context().Done():
		}
	})
	mux.HandleFunc("POST /fail/{id}", r.fail)
	mux.HandleFunc("GET /failures", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		writeJSON(w, r.failures)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, r.snapshot()) })
	mux.HandleFunc("GET /endpoints", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		writeJSON(w, r.perEndpoint)
	})
	mux.HandleFunc("GET /arrivals", func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		writeJSON(w, r.arrivals)
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, _ *http.Request) { r.reset() })
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// hook is the webhook of endpoint ep ("" for /hook): what a minimal real consumer does before
// its own work.
func (r *receiver) hook(w http.ResponseWriter, req *http.Request, ep string) {
	at := time.Now().UnixNano()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !r.verify(req.Header, body) {
		r.mu.Lock()
		r.stats.Requests++
		r.stats.BadSignatures++
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if strings.HasPrefix(req.Header.Get("Content-Type"), "application/cloudevents-batch+json") {
		// A batch, what a consumer of batches does: decode the array, then each event.
		var evs []struct {
			ID            string          `json:"id"`
			AggregateType string          `json:"aggregatetype"`
			AggregateID   string          `json:"aggregateid"`
			Data          json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &evs); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.stats.Requests++
		r.mu.Unlock()
		for _, ev := range evs {
			r.recordEvent(ep, ev.ID, ev.AggregateType+"/"+ev.AggregateID, payloadSeq(ev.Data), len(ev.Data), at)
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	id := req.Header.Get("X-Event-Id")
	agg := req.Header.Get("X-Aggregate-Type") + "/" + req.Header.Get("X-Aggregate-Id")
	r.record(ep, id, agg, payloadSeq(body), len(body), at)
	w.WriteHeader(http.StatusOK)
}

// fail is a failing partner's endpoint: it checks the signature as /ep/{id} does (a bad one is
// a 401 and counted as one), counts the attempt and the event id, and answers 500.
func (r *receiver) fail(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !r.verify(req.Header, body) {
		r.mu.Lock()
		r.stats.Requests++
		r.stats.BadSignatures++
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	r.countFailure(req.PathValue("id"), req.Header.Get("X-Event-Id"))
	http.Error(w, "bench: this endpoint fails every attempt", http.StatusInternalServerError)
}

func (r *receiver) countFailure(ep, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Requests++
	f := r.failures[ep]
	if f == nil {
		f = &failures{ids: map[string]bool{}}
		r.failures[ep] = f
	}
	f.Attempts++
	if !f.ids[id] {
		f.ids[id] = true
		f.Events++
	}
}

func (r *receiver) verify(h http.Header, body []byte) bool {
	ts, err := strconv.ParseInt(h.Get("X-Timestamp"), 10, 64)
	if err != nil {
		return false
	}
	want := signature.AppendX(nil, r.keys, ts, body)
	for _, sig := range strings.Split(h.Get("X-Signature"), ",") {
		if hmac.Equal([]byte(sig), want) {
			return true
		}
	}
	return false
}

func (r *receiver) record(ep, id, agg string, seq int64, size int, at int64) {
	r.mu.Lock()
	r.stats.Requests++
	r.mu.Unlock()
	r.recordEvent(ep, id, agg, seq, size, at)
}

// recordEvent records one event's arrival at endpoint ep ("" for /hook; a request may carry
// several events).
func (r *receiver) recordEvent(ep, id, agg string, seq int64, size int, at int64) {
	if ep != "" {
		id, agg = ep+" "+id, ep+" "+agg
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.stats
	if s.FirstNanos == 0 {
		s.FirstNanos = at
	}
	if _, dup := r.arrivals[id]; dup {
		s.Duplicates++
		return
	}
	r.arrivals[id] = at
	if ep != "" {
		r.perEndpoint[ep]++
	}
	s.LastNanos = max(s.LastNanos, at)
	s.BodyBytes += int64(size)
	if seq < r.lastSeq[agg] {
		s.OrderViolations++
	}
	r.lastSeq[agg] = max(r.lastSeq[agg], seq)
}

// payloadSeq finds "seq": <n> in a body without decoding all of it; -1 if absent. Every bench
// payload carries seq rising per aggregate in commit order.
func payloadSeq(body []byte) int64 {
	i := bytes.Index(body, []byte(`"seq":`))
	if i < 0 {
		return -1
	}
	rest := bytes.TrimLeft(body[i+len(`"seq":`):], " ")
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// serveReceiver listens on addr, prints "listening <host:port>" on out, and serves until ctx
// is done.
func serveReceiver(ctx context.Context, addr, secret string, out io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("receiver listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: newReceiver(secret).handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
