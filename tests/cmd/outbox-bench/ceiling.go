package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/signature"
)

// The HTTP ceiling: the same signed requests the relay sent, posted to the same receiver from
// this process, with no database and no ordering, by `concurrency` workers on kept-alive
// connections. Two clients: a lean one (a connection per worker, each request written in one
// call, the response read with http.ReadResponse), which is the ceiling the targets use, and
// net/http's Client, for comparison.

// poster sends one request per call on behalf of one worker.
type poster interface {
	post(ctx context.Context, r *request) error
	close()
}

// signer builds the relay's headers for a request, signing at the time of the attempt.
type signer struct{ keys [][]byte }

func (s signer) sign(r *request, ts int64) []byte {
	return signature.AppendX(nil, s.keys, ts, r.Body)
}

// sequence mimics X-Event-Sequence: commit LSN and index, fixed-width hex.
func sequence(i int) string {
	return fmt.Sprintf("%016X-%08X", 0x1538A30+i/backlogChunk, i%backlogChunk)
}

// runCeiling posts every request once with the given number of workers, each with its own
// poster, and returns how long the client took.
func runCeiling(ctx context.Context, reqs []request, workers int, newPoster func() (poster, error)) (time.Duration, error) {
	posters := make([]poster, workers)
	for w := range posters {
		p, err := newPoster()
		if err != nil {
			return 0, err
		}
		posters[w] = p
	}
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for _, p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.close()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) || ctx.Err() != nil {
					return
				}
				if err := p.post(ctx, &reqs[i]); err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					next.Store(int64(len(reqs))) // stop the others
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return elapsed, err
	}
	return elapsed, ctx.Err()
}

// leanPoster holds one kept-alive connection and writes each request in a single call.
type leanPoster struct {
	addr, host string
	signer     signer
	conn       net.Conn
	br         *bufio.Reader
	buf        []byte
	seq        int
}

func newLeanPoster(rawURL string, s signer) (poster, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return &leanPoster{addr: u.Host, host: u.Host, signer: s}, nil
}

func (p *leanPoster) post(ctx context.Context, r *request) error {
	if p.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", p.addr)
		if err != nil {
			return err
		}
		p.conn, p.br = conn, bufio.NewReaderSize(conn, 4096)
	}
	p.seq++
	p.buf = p.appendRequest(p.buf[:0], r, time.Now().Unix())
	if _, err := p.conn.Write(p.buf); err != nil {
		p.close()
		return err
	}
	resp, err := http.ReadResponse(p.br, nil)
	if err != nil {
		p.close()
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		p.close()
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// appendRequest writes the request line, the relay's headers and the body.
func (p *leanPoster) appendRequest(b []byte, r *request, ts int64) []byte {
	header := func(k, v string) {
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	path := r.Path
	if path == "" {
		path = "/hook"
	}
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\n"...)
	header("Host", p.host)
	header("User-Agent", "outbox-relay/bench")
	header("Content-Length", strconv.Itoa(len(r.Body)))
	header("Content-Type", "application/json")
	header("X-Event-Id", r.ID)
	header("X-Event-Type", r.EventType)
	header("X-Aggregate-Type", r.AggregateType)
	header("X-Aggregate-Id", r.AggregateID)
	header("X-Attempt", "1")
	header("X-Event-Sequence", sequence(p.seq))
	header("X-Timestamp", strconv.FormatInt(ts, 10))
	b = append(b, "X-Signature: "...)
	b = signature.AppendX(b, p.signer.keys, ts, r.Body)
	b = append(b, "\r\n\r\n"...)
	return append(b, r.Body...)
}

func (p *leanPoster) close() {
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}

// stdPoster posts through a shared net/http Client, set up as the relay's publisher sets up
// net/http when a proxy applies (cloned default Transport, idle connections for twice the
// workers).
type stdPoster struct {
	url    string
	client *http.Client
	signer signer
	seq    int
}

func newStdClient(workers int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = workers * 2
	tr.MaxIdleConnsPerHost = workers * 2
	tr.ResponseHeaderTimeout = 10 * time.Second
	return &http.Client{Transport: tr}
}

func (p *stdPoster) post(ctx context.Context, r *request) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(r.Body))
	if err != nil {
		return err
	}
	p.seq++
	ts := time.Now().Unix()
	h := req.Header
	set := func(k, v string) { h[k] = []string{v} }
	set("Content-Type", "application/json")
	set("User-Agent", "outbox-relay/bench")
	set("X-Event-Id", r.ID)
	set("X-Event-Type", r.EventType)
	set("X-Aggregate-Type", r.AggregateType)
	set("X-Aggregate-Id", r.AggregateID)
	set("X-Attempt", "1")
	set("X-Event-Sequence", sequence(p.seq))
	set("X-Timestamp", strconv.FormatInt(ts, 10))
	set("X-Signature", string(p.signer.sign(r, ts)))
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

func (p *stdPoster) close() {}

// ceilingResult is the receiver fed by a client in this process.
type ceilingResult struct {
	Requests   int
	Rate       float64 // at the receiver, like the relay's
	ClientWall time.Duration
	Load       load // Self is the client
	Stats      receiverStats
}

func (e *env) ceiling(ctx context.Context, reqs []request, newPoster func() (poster, error)) (ceilingResult, error) {
	res := ceilingResult{Requests: len(reqs)}
	if len(reqs) == 0 {
		return res, errors.New("no requests to send: the backlog drain row failed or did not run")
	}
	if err := e.recv.Reset(ctx); err != nil {
		return res, err
	}
	before, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	if res.ClientWall, err = runCeiling(ctx, reqs, concurrency, newPoster); err != nil {
		return res, err
	}
	after, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	if res.Stats, err = e.recv.Stats(ctx); err != nil {
		return res, err
	}
	if res.Stats.Unique != len(reqs) {
		return res, fmt.Errorf("receiver has %d of %d requests", res.Stats.Unique, len(reqs))
	}
	res.Load = loadBetween(before, after)
	res.Rate = receiverRate(res.Stats)
	return res, checkStats(res.Stats, false)
}

func (e *env) leanPosters() func() (poster, error) {
	s := signer{keys: [][]byte{[]byte(benchSecret)}}
	return func() (poster, error) { return newLeanPoster(e.recv.hookURL(), s) }
}

func (e *env) stdPosters() func() (poster, error) {
	s := signer{keys: [][]byte{[]byte(benchSecret)}}
	client := newStdClient(concurrency)
	return func() (poster, error) { return &stdPoster{url: e.recv.hookURL(), client: client, signer: s}, nil }
}
