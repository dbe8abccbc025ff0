package main

import (
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses; fields count from the last ')'.
	line := []byte("4242 (postgres: a) b) S 17 4242 4242 0 -1 4194560 100 0 0 0 150 25 7 3 20 0 1 0 100 1000 10\n")
	got, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := procTimes{state: 'S', ppid: 17, self: 175 * clockTick, children: 10 * clockTick}
	if got != want {
		t.Fatalf("parseStat = %+v, want %+v", got, want)
	}
	if _, err := parseStat([]byte("12 (x) S 1 2")); err == nil {
		t.Fatal("short line: want an error")
	}
}

func TestParseVmHWM(t *testing.T) {
	got, err := parseVmHWM([]byte("Name:\toutbox-relay\nVmPeak:\t 1000 kB\nVmHWM:\t   45312 kB\nVmRSS:\t 40000 kB\n"))
	if err != nil || got != 45312<<10 {
		t.Fatalf("parseVmHWM = %d, %v; want %d", got, err, 45312<<10)
	}
	if _, err := parseVmHWM([]byte("Name:\tx\n")); err == nil {
		t.Fatal("no VmHWM: want an error")
	}
}

func TestParseMachineBusy(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseMachineBusy([]byte("cpu  100 5 50 9000 40 3 2 11 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if err != nil || got != 160*clockTick {
		t.Fatalf("parseMachineBusy = %v, %v; want %v", got, err, 160*clockTick)
	}
}

func TestClassifyTitle(t *testing.T) {
	for title, want := range map[string]string{
		"postgres: walsender postgres 127.0.0.1(40122) START_REPLICATION\x00": pgWalsender,
		"postgres: postgres drain_1 127.0.0.1(40110) idle\x00":                pgBackend,
		"postgres: postgres drain_1 [local] UPDATE\x00":                       pgBackend,
		"postgres: checkpointer \x00":                                         pgBackground,
		"postgres: autovacuum worker drain_1\x00":                             pgBackground,
		"": pgBackground,
	} {
		if got := classifyTitle(title); got != want {
			t.Errorf("classifyTitle(%q) = %q, want %q", title, got, want)
		}
	}
}

func TestPgDelta(t *testing.T) {
	s := time.Second
	a := pgSnapshot{
		postmaster: procTimes{self: 1 * s, children: 2 * s},
		children: map[int]pgChild{
			10: {class: pgBackground, cpu: 5 * s},
			11: {class: pgBackend, cpu: 1 * s}, // exits in between, having used 3s in all
		},
	}
	b := pgSnapshot{
		postmaster: procTimes{self: 1500 * time.Millisecond, children: 2*s + 3*s + 4*s}, // 11 and a short-lived one (4s) reaped
		children: map[int]pgChild{
			10: {class: pgBackground, cpu: 6 * s},
			12: {class: pgWalsender, cpu: 2 * s}, // started in between
		},
	}
	u := pgDelta(a, b)
	if want := 500*time.Millisecond + 1*s + 2*s + (3*s - 1*s) + 4*s; u.Total != want {
		t.Fatalf("total %v, want %v", u.Total, want)
	}
	for class, want := range map[string]time.Duration{pgWalsender: 2 * s, pgBackground: 1500 * time.Millisecond, pgExited: 6 * s} {
		if u.ByClass[class] != want {
			t.Errorf("%s = %v, want %v (all: %v)", class, u.ByClass[class], want, u.ByClass)
		}
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	want := summary{P50: 50 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond, N: 100}
	if got != want {
		t.Fatalf("summarize = %+v, want %+v", got, want)
	}
	if one := summarize([]time.Duration{3}); one.P50 != 3 || one.P99 != 3 || one.Max != 3 {
		t.Fatalf("one sample: %+v", one)
	}
}

func TestPayloadSeq(t *testing.T) {
	for body, want := range map[string]int64{
		`{"pad": "xxx", "seq": 12345}`: 12345,
		`{"seq":7}`:                    7,
		`{"pad": "x"}`:                 -1,
		`{"seq": "a"}`:                 -1,
	} {
		if got := payloadSeq([]byte(body)); got != want {
			t.Errorf("payloadSeq(%s) = %d, want %d", body, got, want)
		}
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999.6: "1,000", 24310.4: "24,310", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigSelected(t *testing.T) {
	c := config{Only: []string{"steady", " Sweep "}}
	for row, want := range map[string]bool{rowSteady1k: true, sweepRow(10): true, rowDrain: false} {
		if got := c.selected(row); got != want {
			t.Errorf("selected(%q) = %v, want %v", row, got, want)
		}
	}
	if !(config{}).selected(rowDrain) {
		t.Error("no filter: every row runs")
	}
}

func TestGCTraceLinesAreSummed(t *testing.T) {
	var g gcTrace
	lines := "gc 1 @0.010s 2%: 0.018+1.3+0.003 ms clock, 0.075+0.5/1.2/0.8+0.015 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"not a gc line\n" +
		"gc 2 @0.020s 3%: 0.01+1+0.01 ms clock, 1+2/3/4+5 ms cpu, 9->10->7 MB, 9 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)\n"
	// Written in two pieces that split a line, as a pipe may deliver it.
	_, _ = g.Write([]byte(lines[:50]))
	_, _ = g.Write([]byte(lines[50:]))
	got := g.snapshot()
	want := time.Duration((0.075 + 0.5 + 1.2 + 0.8 + 0.015 + 15) * float64(time.Millisecond))
	if got.cycles != 2 || got.liveMB != 7 || (got.cpu-want).Abs() > time.Microsecond {
		t.Fatalf("got %+v, want 2 cycles, %v of GC CPU, 7 MB live", got, want)
	}
}
