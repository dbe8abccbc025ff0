package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat. USER_HZ is 100 on every Linux
// architecture Go supports, and Go cannot call sysconf without cgo.
const clockTick = 10 * time.Millisecond

// procTimes is what one /proc/<pid>/stat line says about CPU use.
type procTimes struct {
	state    byte // R, S, D, Z (zombie: exited, not yet reaped), ...
	ppid     int
	self     time.Duration // utime + stime of all the process's threads
	children time.Duration // cutime + cstime: children that exited and were reaped
}

// parseStat reads the fields of /proc/<pid>/stat that procTimes holds. The command name (field
// 2) is in parentheses and may contain spaces, so fields are counted from the last ')'.
func parseStat(line []byte) (procTimes, error) {
	end := bytes.LastIndexByte(line, ')')
	if end < 0 {
		return procTimes{}, fmt.Errorf("stat line without a command name: %q", line)
	}
	// After ')': state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(string(line[end+1:]))
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("stat line has %d fields after the name, want at least 15", len(f))
	}
	var n [5]int64
	for i, idx := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("stat field %d: %w", idx+3, err)
		}
		n[i] = v
	}
	return procTimes{state: f[0][0], ppid: int(n[0]), self: time.Duration(n[1]+n[2]) * clockTick,
		children: time.Duration(n[3]+n[4]) * clockTick}, nil
}

func readStat(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	return parseStat(b)
}

// processCPU returns the CPU time (user + system) a live process has used so far.
func processCPU(pid int) (time.Duration, error) {
	t, err := readStat(pid)
	return t.self, err
}

// peakRSS returns a live process's peak resident set size (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmHWM(b)
}

func parseVmHWM(status []byte) (int64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmHWM line %q", line)
		}
		kib, err := strconv.ParseInt(f[0], 10, 64)
		return kib << 10, err
	}
	return 0, fmt.Errorf("no VmHWM in /proc/<pid>/status")
}

// PostgreSQL process classes, from the process title each backend sets.
const (
	pgWalsender  = "walsender"
	pgBackend    = "backends"
	pgBackground = "background" // checkpointer, WAL writer, autovacuum, ...
	pgExited     = "exited"     // processes that ended (or were ending) during the window
)

// pgSnapshot is the CPU used so far by a postmaster and each of its live children.
type pgSnapshot struct {
	postmaster procTimes
	children   map[int]pgChild
}

type pgChild struct {
	class string
	cpu   time.Duration
}

// settledSince reports whether the processes that ended since before are gone and reaped, so
// that their CPU is in the postmaster's cutime: none is exiting, and no walsender is new.
func (s pgSnapshot) settledSince(before pgSnapshot) bool {
	for pid, c := range s.children {
		if _, old := before.children[pid]; c.class == pgExited || (c.class == pgWalsender && !old) {
			return false
		}
	}
	return true
}

// snapshotPostgres reads the CPU of the postmaster whose data directory is dataDir, and of
// every live child of it.
func snapshotPostgres(dataDir string) (pgSnapshot, error) {
	pid, err := postmasterPID(dataDir)
	if err != nil {
		return pgSnapshot{}, err
	}
	pm, err := readStat(pid)
	if err != nil {
		return pgSnapshot{}, fmt.Errorf("postmaster %d: %w", pid, err)
	}
	snap := pgSnapshot{postmaster: pm, children: map[int]pgChild{}}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		t, err := readStat(child)
		if err != nil || t.ppid != pid {
			continue
		}
		title, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		class := classifyTitle(string(title))
		if len(title) == 0 || t.state == 'Z' {
			class = pgExited // exiting: its memory, and so its title, is already gone
		}
		snap.children[child] = pgChild{class: class, cpu: t.self}
	}
	return snap, nil
}

func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// classifyTitle sorts a PostgreSQL process by its title, e.g. "postgres: walsender postgres
// 127.0.0.1(5432) START_REPLICATION" or "postgres: postgres bench_3 127.0.0.1(5433) idle".
func classifyTitle(title string) string {
	rest, ok := strings.CutPrefix(strings.TrimRight(title, "\x00"), "postgres: ")
	switch {
	case !ok:
		return pgBackground
	case strings.HasPrefix(rest, "walsender "):
		return pgWalsender
	case strings.Contains(rest, "127.0.0.1(") || strings.Contains(rest, "[local]"):
		return pgBackend
	}
	return pgBackground
}

// pgUsage is the CPU PostgreSQL used between two snapshots, in total and by process class.
type pgUsage struct {
	Total   time.Duration
	ByClass map[string]time.Duration
}

// pgDelta attributes the CPU used between two snapshots. A child alive at the end is charged
// for what it used since the start (all of it if it started later); what children that exited
// in between used shows up in the postmaster's cutime/cstime, and is charged to "exited".
func pgDelta(a, b pgSnapshot) pgUsage {
	u := pgUsage{ByClass: map[string]time.Duration{}}
	var liveA, liveB time.Duration
	for _, c := range a.children {
		liveA += c.cpu
	}
	for pid, c := range b.children {
		liveB += c.cpu
		u.ByClass[c.class] += c.cpu - a.children[pid].cpu
	}
	u.Total = (b.postmaster.self + b.postmaster.children + liveB) - (a.postmaster.self + a.postmaster.children + liveA)
	var attributed time.Duration
	for _, d := range u.ByClass {
		attributed += d
	}
	u.ByClass[pgBackground] += b.postmaster.self - a.postmaster.self
	attributed += b.postmaster.self - a.postmaster.self
	if rest := u.Total - attributed; rest > 0 {
		u.ByClass[pgExited] += rest
	}
	return u
}

// machineBusy returns the CPU time all CPUs have spent busy since boot, from the first line of
// /proc/stat: user, nice, system, irq and softirq (guest time is inside user; idle, iowait
// and steal are not busy).
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineBusy(b)
}

func parseMachineBusy(stat []byte) (time.Duration, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected first line of /proc/stat: %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system [idle iowait] irq softirq
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat field %d: %w", i, err)
		}
		busy += v
	}
	return time.Duration(busy) * clockTick, nil
}
