// Package relaytest holds what the relay's integration tests, benchmarks and torture runs share:
// a webhook receiver that verifies and records deliveries, a producer that writes outbox
// transactions (some rolled back), and the checks of the delivery guarantees.
package relaytest

import (
	"bytes"
	"compress/gzip"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/signature"
)

// Delivery is one request the receiver accepted.
type Delivery struct {
	ID        string
	Aggregate string // type/id
	Seq       int    // the producer's per-aggregate sequence, from the payload
	Attempt   int
	Sequence  string // X-Event-Sequence: commit LSN and index, fixed-width hex
	Trace     string // traceparent
	At        time.Time
	// Request numbers the accepted request that carried the event (from 1); the events of one
	// batch share it.
	Request int
}

// Request is one request whose signature verified, accepted or not, with the ids it carried in
// order (one for a single-event request).
type Request struct {
	IDs    []string
	Status int // the status answered
	Batch  bool
}

// Receiver is a real HTTP server that checks the signature of every request and records the
// accepted ones. Fail decides, per request, whether to answer with an error status instead.
type Receiver struct {
	*httptest.Server
	Secret string

	// Fail returns a status code to answer instead of 200, or 0 to accept. Set before use or
	// through SetFail.
	fail       atomic.Pointer[func(*http.Request) int]
	failEvents atomic.Pointer[func([]Delivery) int]
	hang       atomic.Bool
	header     atomic.Pointer[http.Header]
	mu         sync.Mutex
	log        []Delivery
	reqs       []Request
	byID       map[string]int
	badSigs    atomic.Int64
	total      atomic.Int64
	release    chan struct{}
}

// NewReceiver starts a receiver that verifies X-Signature with secret.
func NewReceiver(secret string) *Receiver {
	r := &Receiver{Secret: secret, byID: map[string]int{}, release: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// SetFail installs a failure rule (nil accepts everything).
func (r *Receiver) SetFail(f func(*http.Request) int) {
	if f == nil {
		r.fail.Store(nil)
		return
	}
	r.fail.Store(&f)
}

// SetHeader sets a header on every response from now on (for example Retry-After). It is safe
// while the server runs.
func (r *Receiver) SetHeader(key, value string) {
	for {
		old := r.header.Load()
		h := http.Header{}
		if old != nil {
			h = old.Clone()
		}
		h.Set(key, value)
		if r.header.CompareAndSwap(old, &h) {
			return
		}
	}
}

// SetFailEvents installs a failure rule that sees the events a request carries (several for a
// batch); nil accepts everything. It is consulted when the rule of SetFail accepts.
func (r *Receiver) SetFailEvents(f func([]Delivery) int) {
	if f == nil {
		r.failEvents.Store(nil)
		return
	}
	r.failEvents.Store(&f)
}

// Hang makes every request block until Unhang (or the client gives up).
func (r *Receiver) Hang() { r.hang.Store(true) }

// Unhang releases hung requests and accepts again.
func (r *Receiver) Unhang() {
	r.hang.Store(false)
	r.mu.Lock()
	close(r.release)
	r.release = make(chan struct{})
	r.mu.Unlock()
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.total.Add(1)
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if r.hang.Load() {
		r.mu.Lock()
		ch := r.release
		r.mu.Unlock()
		select {
		case <-ch:
		case <-req.Context().Done():
			return
		}
	}
	if h := r.header.Load(); h != nil {
		for k, v := range *h {
			w.Header()[k] = v
		}
	}
	if !r.verify(req, body) {
		r.badSigs.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if body, err = io.ReadAll(zr); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
	}
	ds, batch, err := parse(req, body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	code := 0
	if f := r.fail.Load(); f != nil {
		code = (*f)(req)
	}
	if f := r.failEvents.Load(); f != nil && code == 0 {
		code = (*f)(ds)
	}
	if code != 0 {
		r.mu.Lock()
		r.reqs = append(r.reqs, Request{IDs: ids, Status: code, Batch: batch})
		r.mu.Unlock()
		w.WriteHeader(code)
		return
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, Request{IDs: ids, Status: http.StatusOK, Batch: batch})
	n := len(r.reqs)
	for _, d := range ds {
		d.Request = n
		r.log = append(r.log, d)
		r.byID[d.ID]++
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// parse reads the events of a request: raw, CloudEvents binary mode, or a CloudEvents batch.
func parse(req *http.Request, body []byte) (ds []Delivery, batch bool, err error) {
	var attempt int
	fmt.Sscan(req.Header.Get("X-Attempt"), &attempt)
	now := time.Now()
	if strings.HasPrefix(req.Header.Get("Content-Type"), "application/cloudevents-batch+json") {
		var evs []struct {
			ID            string `json:"id"`
			AggregateType string `json:"aggregatetype"`
			AggregateID   string `json:"aggregateid"`
			Sequence      string `json:"sequence"`
			TraceParent   string `json:"traceparent"`
			Data          struct {
				Seq int `json:"seq"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &evs); err != nil {
			return nil, true, err
		}
		for _, e := range evs {
			ds = append(ds, Delivery{ID: e.ID, Seq: e.Data.Seq, Attempt: attempt, At: now, Sequence: e.Sequence,
				Trace: e.TraceParent, Aggregate: e.AggregateType + "/" + e.AggregateID})
		}
		return ds, true, nil
	}
	var p struct {
		Seq int `json:"seq"`
	}
	_ = json.Unmarshal(body, &p)
	d := Delivery{ID: req.Header.Get("X-Event-Id"), Seq: p.Seq, Attempt: attempt, At: now,
		Sequence: req.Header.Get("X-Event-Sequence"), Trace: req.Header.Get("Traceparent"),
		Aggregate: req.Header.Get("X-Aggregate-Type") + "/" + req.Header.Get("X-Aggregate-Id")}
	if id := req.Header.Get("Ce-Id"); id != "" {
		d.ID, d.Sequence = id, req.Header.Get("Ce-Sequence")
		d.Aggregate = req.Header.Get("Ce-Aggregatetype") + "/" + req.Header.Get("Ce-Aggregateid")
	}
	return []Delivery{d}, false, nil
}

func (r *Receiver) verify(req *http.Request, body []byte) bool {
	ts := req.Header.Get("X-Timestamp")
	var n int64
	if _, err := fmt.Sscan(ts, &n); err != nil {
		return false
	}
	want := signature.AppendX(nil, [][]byte{[]byte(r.Secret)}, n, body)
	for _, sig := range strings.Split(req.Header.Get("X-Signature"), ",") {
		if hmac.Equal([]byte(sig), want) {
			return true
		}
	}
	return false
}

// Deliveries returns a copy of the accepted requests, in arrival order.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.log...)
}

// RequestLog returns a copy of the requests whose signature verified, accepted or failed on
// purpose, in arrival order.
func (r *Receiver) RequestLog() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Unique returns the number of distinct event ids accepted.
func (r *Receiver) Unique() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// Has reports whether id was accepted at least once.
func (r *Receiver) Has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id] > 0
}

// BadSignatures returns the number of requests whose signature did not verify.
func (r *Receiver) BadSignatures() int64 { return r.badSigs.Load() }

// Requests returns the number of requests received, accepted or not.
func (r *Receiver) Requests() int64 { return r.total.Load() }
