package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// cpuSnapshot is the CPU used so far by the receiver, this process, PostgreSQL and the whole
// machine.
type cpuSnapshot struct {
	at             time.Time
	receiver, self time.Duration
	pg             pgSnapshot
	machine        time.Duration
}

func (e *env) cpuSnapshot() (cpuSnapshot, error) {
	s := cpuSnapshot{at: time.Now()}
	var err error
	if s.receiver, err = processCPU(e.recv.pid()); err != nil {
		return s, fmt.Errorf("receiver CPU: %w", err)
	}
	if s.self, err = processCPU(os.Getpid()); err != nil {
		return s, fmt.Errorf("own CPU: %w", err)
	}
	if s.pg, err = snapshotPostgres(e.dataDir()); err != nil {
		return s, fmt.Errorf("PostgreSQL CPU: %w", err)
	}
	if s.machine, err = machineBusy(); err != nil {
		return s, fmt.Errorf("machine CPU: %w", err)
	}
	return s, nil
}

// settledSnapshot waits (up to 2s) until PostgreSQL has reaped every process that ended since
// before, so that what they used is counted, then takes a snapshot.
func (e *env) settledSnapshot(ctx context.Context, before cpuSnapshot) (cpuSnapshot, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		s, err := e.cpuSnapshot()
		if err != nil || s.pg.settledSince(before.pg) || time.Now().After(deadline) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// load is what the watched processes and the whole machine used between two snapshots.
type load struct {
	Wall     time.Duration
	Receiver time.Duration
	Self     time.Duration // this process: the ceiling client, or the steady writers
	PG       pgUsage
	Machine  time.Duration // busy time of all CPUs
}

func loadBetween(a, b cpuSnapshot) load {
	return load{Wall: b.at.Sub(a.at), Receiver: b.receiver - a.receiver, Self: b.self - a.self,
		PG: pgDelta(a.pg, b.pg), Machine: b.machine - a.machine}
}

// OtherCPUs is how many CPUs, on average over the window, were busy with something the bench
// does not account for: other work on the host, which makes the row's figures noisy. watched is
// the CPU of the bench's other processes in the window (the relay, pg_recvlogical).
func (l load) OtherCPUs(watched time.Duration) float64 {
	if l.Wall <= 0 {
		return 0
	}
	other := l.Machine - l.Receiver - l.Self - l.PG.Total - watched
	return max(other.Seconds(), 0) / l.Wall.Seconds()
}

func (e *env) dataDir() string { return filepath.Join(e.cluster.Dir, "data") }
