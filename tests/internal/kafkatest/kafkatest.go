// Package kafkatest runs franz-go's in-process Kafka cluster (kfake, which speaks the real
// protocol) for tests, persisted to a temp dir so that it can be restarted, and reads topics
// back for the checks. No real Kafka broker can run on the machines these tests run on.
package kafkatest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is a kfake cluster on fixed ports with its data in a temp dir.
type Cluster struct {
	t     testing.TB
	ports []int
	dir   string
	seed  []kfake.Opt
	c     *kfake.Cluster
}

// Start starts brokers nodes holding topics (with partitions each), fsyncing every produce so
// that a restart keeps every acknowledged record. Cleanup closes it.
func Start(t testing.TB, brokers int, partitions int32, topics ...string) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir()}
	for range brokers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.ports = append(c.ports, ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	c.seed = []kfake.Opt{kfake.SeedTopics(partitions, topics...)}
	c.Restart()
	t.Cleanup(c.Close)
	return c
}

// Brokers is the comma-separated seed list.
func (c *Cluster) Brokers() string {
	s := make([]string, len(c.ports))
	for i, p := range c.ports {
		s[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return strings.Join(s, ",")
}

// Close stops every broker (their clients' connections drop); it may be called more than once.
func (c *Cluster) Close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

// Restart closes the cluster if it runs and starts it again from its data dir, on the same ports.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.Close()
	opts := []kfake.Opt{kfake.NumBrokers(len(c.ports)), kfake.Ports(c.ports...), kfake.DataDir(c.dir), kfake.SyncWrites()}
	if c.seed != nil {
		opts = append(opts, c.seed...)
		c.seed = nil // the topics persist; seeding again is not needed
	}
	var err error
	for i := 0; i < 50; i++ { // the ports may linger for a moment after Close
		if c.c, err = kfake.NewCluster(opts...); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("kfake: %v", err)
}

// Record is one stored record.
type Record struct {
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   map[string]string
}

// EndOffsets returns the next offset of each partition of topic.
func EndOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var firstErr error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && firstErr == nil {
			firstErr = o.Err
		}
		out[o.Partition] = o.Offset
	})
	return out, firstErr
}

// ReadTopic returns every record of topic, per partition in offset order (partitions one after
// the other). A failed read is started again until ctx ends.
func ReadTopic(ctx context.Context, t testing.TB, brokers, topic string) []Record {
	t.Helper()
	for {
		recs, err := readTopic(ctx, brokers, topic)
		if err == nil {
			return recs
		}
		if ctx.Err() != nil {
			t.Fatalf("read topic %s: %v", topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readTopic(ctx context.Context, brokers, topic string) ([]Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := EndOffsets(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	byPart := map[int32][]Record{}
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(fctx)
		cancel()
		if err := fs.Err0(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			byPart[r.Partition] = append(byPart[r.Partition], Record{Partition: r.Partition, Offset: r.Offset,
				Key: r.Key, Value: r.Value, Headers: h})
			next[r.Partition] = r.Offset + 1
		})
	}
	var out []Record
	for p := int32(0); int(p) < len(ends); p++ {
		out = append(out, byPart[p]...)
	}
	return out, nil
}
