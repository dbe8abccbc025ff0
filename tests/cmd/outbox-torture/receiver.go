package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cloudevents"
	"github.com/outbox-relay/outbox-relay/inbox"
)

// mode is how the receiver treats a request.
type mode int

const (
	modeNormal  mode = iota
	mode500          // answer 500 without touching the inbox
	modeHang         // hold the request until the relay gives up, then drop the connection
	modeReset        // reset the connection without an answer
	modeDropAck      // apply the event in the inbox, then reset instead of answering
	modeSlow         // answer after 50–200 ms
	modeCount
)

// hangLimit bounds a held request, in case the relay never gives up on it.
const hangLimit = 5 * time.Second

// episode is a receiver fault: until when, in which mode, for what share of requests.
type episode struct {
	mode  mode
	share float64
	until time.Time
}

// delivery is one request the receiver answered with a 2xx.
type delivery struct {
	ID        string
	Aggregate string // X-Aggregate-Type/X-Aggregate-Id
	Seq       int    // the writer's per-aggregate sequence, from the payload
	Sequence  string // X-Event-Sequence: commit LSN and index in the transaction
	Attempt   int
	At        time.Time
	Endpoint  string // the endpoint whose URL (/ep/<id>) received it, in an endpoints run; else ""
	Relay     int    // the fleet's id of the relay process that sent it (procsock.go); 0: unknown
}

// pairKey names a delivery of event id to an endpoint ("" outside an endpoints run).
func pairKey(endpoint, id string) string {
	if endpoint == "" {
		return id
	}
	return endpoint + " " + id
}

// receiver is the webhook endpoint: it verifies each request, applies faults, passes the rest
// to an inbox.Handler and records every delivery it answers with a 2xx — before the answer
// leaves, so that whatever the relay saw acknowledged is in the log.
type receiver struct {
	URL      string
	base     string // http://host:port
	srv      *http.Server
	verifier *inbox.Verifier
	inbox    *inbox.Handler
	episode  atomic.Pointer[episode]

	requests, badSignatures, inboxRefusals atomic.Int64
	faulted                                [modeCount]atomic.Int64

	mu   sync.Mutex
	log  []delivery
	seen map[string]struct{} // pairKey of each delivery

	// In an endpoints run (startEndpointReceiver): each endpoint's verifier, by id, and the
	// requests to a path that names no endpoint the manager created.
	endpoints       bool
	epMu            sync.Mutex
	epSecrets       map[string]string
	epVerifiers     map[string]*inbox.Verifier
	unknownEndpoint atomic.Int64
	// blackouts: endpoints answered 503 on every request until the time given (blackout), so
	// that they lag long enough to spill to their backlog; blackedOut counts those answers.
	blackouts  map[string]time.Time
	blackedOut atomic.Int64
	// gone: endpoints answered 410 Gone on every request until ungone (gone.go), so that the
	// relay disables them, each with whether it answered one yet; goneAnswers counts those
	// answers. goneHook, if set, runs before the first 410 of an episode is answered, under
	// goneMu, which every 410 answer takes: the relay cannot hear a 410 before it returns.
	gone        map[string]bool
	goneAnswers atomic.Int64
	goneMu      sync.Mutex
	goneHook    atomic.Pointer[func(id string)]

	// relayPIDs, once set (an endpoints run), gives the fleet's processes (OS pid → relay
	// id), to tell which one sent a request (procsock.go).
	relayPIDs atomic.Pointer[func() map[int]int]

	// catchUp, if set (a broker run, broker.go), makes mark wait until the bridge has posted
	// everything the broker holds now; false means it could not, and mark returns -1.
	catchUp func() bool
}

// applySQL is the consumer's effect: a count per event, which must end at exactly 1.
const applySQL = `INSERT INTO applied (event_id, n) VALUES ($1, 1)
	ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1`

// startReceiver serves on a loopback port, storing through pool (the consumer's database).
func startReceiver(pool *pgxpool.Pool, secret string) (*receiver, error) {
	v, err := inbox.NewVerifier([]string{secret}, 0)
	if err != nil {
		return nil, err
	}
	h, err := inbox.New(pool, []string{secret}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		_, err := tx.Exec(ctx, applySQL, ev.ID)
		return err
	}, inbox.Config{})
	if err != nil {
		return nil, err
	}
	r := &receiver{verifier: v, inbox: h, seen: map[string]struct{}{}}
	return r, r.listen()
}

// startEndpointReceiver serves the endpoints of an endpoints run: /ep/<id>, each verified with
// its own secret (allow), recorded with its endpoint and answered 200 without an inbox (one
// inbox would take the same event at two endpoints for a duplicate).
func startEndpointReceiver() (*receiver, error) {
	r := &receiver{endpoints: true, seen: map[string]struct{}{}, epSecrets: map[string]string{},
		epVerifiers: map[string]*inbox.Verifier{}}
	return r, r.listen()
}

func (r *receiver) listen() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	r.base = "http://" + ln.Addr().String()
	r.URL = r.base + "/hook"
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0), // resets make the server complain
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			// Looked up in the handler that first records a delivery on c, not here, on
			// the accept loop: the look-up reads /proc, and accepts must not queue behind it.
			return context.WithValue(ctx, relayKey{}, &connRelay{c: c})
		}}
	go func() { _ = r.srv.Serve(ln) }()
	return nil
}

// allow makes the receiver accept requests to /ep/<id> signed with secret; an endpoint keeps
// the first secret it was given.
func (r *receiver) allow(id, secret string) {
	r.epMu.Lock()
	defer r.epMu.Unlock()
	if _, ok := r.epSecrets[id]; ok {
		return
	}
	v, err := inbox.NewVerifier([]string{secret}, 0)
	if err != nil {
		panic(err) // newSecret's secrets are valid
	}
	r.epSecrets[id], r.epVerifiers[id] = secret, v
}

func (r *receiver) secret(id string) string {
	r.epMu.Lock()
	defer r.epMu.Unlock()
	return r.epSecrets[id]
}

// endpointVerifier returns the endpoint a request's path names and its verifier, or nil.
func (r *receiver) endpointVerifier(path string) (string, *inbox.Verifier) {
	id, ok := strings.CutPrefix(path, "/ep/")
	if !ok {
		return "", nil
	}
	r.epMu.Lock()
	defer r.epMu.Unlock()
	return id, r.epVerifiers[id]
}

// Close stops serving, waiting a little for requests in progress.
func (r *receiver) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit+time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		_ = r.srv.Close()
	}
}

// fault starts an episode; a later one replaces it.
func (r *receiver) fault(m mode, share float64, d time.Duration) {
	r.episode.Store(&episode{mode: m, share: share, until: time.Now().Add(d)})
}

// heal ends any episode and blackout.
func (r *receiver) heal() {
	r.episode.Store(nil)
	r.epMu.Lock()
	r.blackouts, r.gone = nil, nil
	r.epMu.Unlock()
}

// setGone makes endpoint id answer 410 Gone to every request (on), or stop doing so; it
// reports whether the episode it ends answered any 410.
func (r *receiver) setGone(id string, on bool) (answered bool) {
	r.goneMu.Lock() // no 410 is being answered meanwhile
	defer r.goneMu.Unlock()
	r.epMu.Lock()
	defer r.epMu.Unlock()
	if r.gone == nil {
		r.gone = map[string]bool{}
	}
	answered = r.gone[id]
	if on {
		r.gone[id] = false
	} else {
		delete(r.gone, id)
	}
	return answered
}

// goneAnswer reports whether endpoint id answers 410 now; if it does and this is the
// episode's first answer, the hook runs first.
func (r *receiver) goneAnswer(id string) bool {
	r.epMu.Lock()
	_, on := r.gone[id]
	r.epMu.Unlock()
	if !on {
		return false
	}
	r.goneMu.Lock()
	defer r.goneMu.Unlock()
	r.epMu.Lock()
	answered, on := r.gone[id]
	r.epMu.Unlock()
	if on && !answered {
		if h := r.goneHook.Load(); h != nil {
			(*h)(id)
		}
		r.epMu.Lock()
		if _, still := r.gone[id]; still {
			r.gone[id] = true
		}
		r.epMu.Unlock()
	}
	return true
}

// blackout answers 503 to every request to endpoint id for d.
func (r *receiver) blackout(id string, d time.Duration) {
	r.epMu.Lock()
	defer r.epMu.Unlock()
	if r.blackouts == nil {
		r.blackouts = map[string]time.Time{}
	}
	r.blackouts[id] = time.Now().Add(d)
}

// blackedOutNow reports whether endpoint id is blacked out.
func (r *receiver) blackedOutNow(id string) bool {
	r.epMu.Lock()
	defer r.epMu.Unlock()
	until, ok := r.blackouts[id]
	return ok && time.Now().Before(until)
}

// modeFor picks the treatment of one request. The per-request draw is not seeded: which
// request meets the fault depends on timing anyway.
func (r *receiver) modeFor() mode {
	ep := r.episode.Load()
	if ep == nil || time.Now().After(ep.until) || rand.Float64() >= ep.share {
		return modeNormal
	}
	return ep.mode
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(req.Body, inbox.DefaultMaxBodyBytes))
	if err != nil {
		return
	}
	verifier, endpoint := r.verifier, ""
	if r.endpoints {
		if endpoint, verifier = r.endpointVerifier(req.URL.Path); verifier == nil {
			r.unknownEndpoint.Add(1)
			http.Error(w, "torture: no endpoint "+req.URL.Path, http.StatusNotFound)
			return
		}
		if r.blackedOutNow(endpoint) {
			r.blackedOut.Add(1)
			http.Error(w, "torture: endpoint blacked out", http.StatusServiceUnavailable)
			return
		}
		if r.goneAnswer(endpoint) {
			r.goneAnswers.Add(1)
			http.Error(w, "torture: endpoint gone", http.StatusGone)
			return
		}
	}
	if err := verifier.Verify(req.Header, body, time.Now()); err != nil {
		r.badSignatures.Add(1)
		http.Error(w, err.Error(), inbox.StatusCode(err))
		return
	}
	m := r.modeFor()
	r.faulted[m].Add(1)
	switch m {
	case mode500:
		http.Error(w, "torture: injected failure", http.StatusInternalServerError)
		return
	case modeHang:
		select {
		case <-req.Context().Done(): // the relay gave up
		case <-time.After(hangLimit):
		}
		reset(w)
		return
	case modeReset:
		reset(w)
		return
	case modeSlow:
		time.Sleep(time.Duration(50+rand.IntN(151)) * time.Millisecond)
	}
	if r.endpoints {
		if m == modeDropAck {
			reset(w) // no inbox here: the relay sees a lost answer, as with the inbox
			return
		}
		r.record(req, body, endpoint)
		w.WriteHeader(http.StatusOK)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var resp bufferedResponse
	r.inbox.ServeHTTP(&resp, req)
	ok := resp.code >= 200 && resp.code < 300
	if m == modeDropAck {
		reset(w) // applied (or not), but the relay never hears of it
		return
	}
	if ok {
		r.record(req, body, "")
	} else {
		r.inboxRefusals.Add(1)
	}
	resp.copyTo(w)
}

// reset drops the request's connection with a TCP reset, without an answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// relayKey keys the connRelay of a request's connection.
type relayKey struct{}

// connRelay finds, once, the relay process that opened a connection (procsock.go).
type connRelay struct {
	c    net.Conn
	once sync.Once
	id   int
}

func (cr *connRelay) of(r *receiver) int {
	cr.once.Do(func() {
		if pids := r.relayPIDs.Load(); pids != nil {
			cr.id = connOwner(cr.c, (*pids)())
		}
	})
	return cr.id
}

// record logs the events of a request the inbox accepted: one, or each event of a CloudEvents
// batch (TORTURE_BATCH), in the batch's order.
func (r *receiver) record(req *http.Request, body []byte, endpoint string) {
	attempt, _ := strconv.Atoi(req.Header.Get("X-Attempt"))
	var ds []delivery
	if cloudevents.IsBatch(req.Header) {
		evs, err := cloudevents.ParseBatch(body)
		if err != nil {
			return // the inbox accepted it, so it parses; nothing to record otherwise
		}
		for _, ev := range evs {
			ds = append(ds, delivery{ID: ev.ID, Seq: payloadSeq(ev.Data), Attempt: attempt, Sequence: ev.Sequence,
				Aggregate: ev.AggregateType + "/" + ev.AggregateID})
		}
	} else {
		ds = append(ds, delivery{ID: req.Header.Get("X-Event-Id"), Seq: payloadSeq(body), Attempt: attempt,
			Sequence:  req.Header.Get("X-Event-Sequence"),
			Aggregate: req.Header.Get("X-Aggregate-Type") + "/" + req.Header.Get("X-Aggregate-Id")})
	}
	relay := 0
	if cr, ok := req.Context().Value(relayKey{}).(*connRelay); ok {
		relay = cr.of(r)
	}
	r.mu.Lock()
	now := time.Now()
	for _, d := range ds {
		d.At, d.Endpoint, d.Relay = now, endpoint, relay
		r.log = append(r.log, d)
		r.seen[pairKey(endpoint, d.ID)] = struct{}{}
	}
	r.mu.Unlock()
}

// payloadSeq is the writer's per-aggregate sequence in a payload.
func payloadSeq(data []byte) int {
	var p struct {
		Seq int `json:"seq"`
	}
	_ = json.Unmarshal(data, &p)
	return p.Seq
}

// mark is the number of deliveries recorded so far: deliveries at a lower index of the log were
// recorded, and so answered, no later than now.
func (r *receiver) mark() int {
	if r.catchUp != nil && !r.catchUp() {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// recorded is the length of the log now, without waiting for a broker run's bridge.
func (r *receiver) recorded() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// missing counts the ids (pairKeys in an endpoints run) not delivered yet.
func (r *receiver) missing(ids []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range ids {
		if _, ok := r.seen[id]; !ok {
			n++
		}
	}
	return n
}

// deliveries returns a copy of the log, in the order recorded.
func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.log...)
}

// bufferedResponse holds the inbox's answer until the delivery is recorded.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header {
	if b.header == nil {
		b.header = http.Header{}
	}
	return b.header
}

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

func (b *bufferedResponse) copyTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	w.WriteHeader(max(b.code, http.StatusOK))
	_, _ = w.Write(b.body.Bytes())
}
