package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		check   func(config) bool
		wantErr string
	}{
		{"defaults", nil, func(c config) bool {
			return c.Events == 20000 && c.Duration == time.Minute && c.Writers == 4 && c.Aggregates == 200 &&
				c.MaxTxSize == 20 && c.Rollback == 0.05 && c.Seed != 0
		}, ""},
		{"everything set", map[string]string{"TORTURE_EVENTS": "1500", "TORTURE_DURATION": "20s", "TORTURE_SEED": "7",
			"TORTURE_WRITERS": "2", "TORTURE_FAULT_GAP": "500ms-2s", "TORTURE_DRAIN": "1m", "TORTURE_RELAY": "/bin/relay"},
			func(c config) bool {
				return c.Events == 1500 && c.Duration == 20*time.Second && c.Seed == 7 && c.Writers == 2 &&
					c.GapMin == 500*time.Millisecond && c.GapMax == 2*time.Second && c.Drain == time.Minute &&
					c.Relay == "/bin/relay"
			}, ""},
		{"one gap", map[string]string{"TORTURE_FAULT_GAP": "2s"}, func(c config) bool {
			return c.GapMin == 2*time.Second && c.GapMax == 2*time.Second
		}, ""},
		{"events not a number", map[string]string{"TORTURE_EVENTS": "lots"}, nil, "TORTURE_EVENTS"},
		{"too few events", map[string]string{"TORTURE_EVENTS": "5"}, nil, "at least 10"},
		{"duration without unit", map[string]string{"TORTURE_DURATION": "60"}, nil, "TORTURE_DURATION"},
		{"negative seed", map[string]string{"TORTURE_SEED": "-1"}, nil, "TORTURE_SEED"},
		{"no writers", map[string]string{"TORTURE_WRITERS": "0"}, nil, "TORTURE_WRITERS"},
		{"gap backwards", map[string]string{"TORTURE_FAULT_GAP": "4s-1s"}, nil, "TORTURE_FAULT_GAP"},
		{"gap too short", map[string]string{"TORTURE_FAULT_GAP": "1ms"}, nil, "TORTURE_FAULT_GAP"},
		{"unknown sink", map[string]string{"TORTURE_SINK": "rabbitmq"}, nil, "nats or kafka"},
		{"nats sink", map[string]string{"TORTURE_SINK": "nats"}, func(c config) bool { return c.Sink == "nats" }, ""},
		{"webhook batch", map[string]string{"TORTURE_BATCH": "20"}, func(c config) bool { return c.Batch == 20 && c.Sink == "" }, ""},
		{"bad batch", map[string]string{"TORTURE_SINK": "kafka", "TORTURE_BATCH": "many"}, nil, "TORTURE_BATCH"},
		{"broker batch", map[string]string{"TORTURE_SINK": "nats", "TORTURE_BATCH": "100"}, func(c config) bool { return c.Batch == 100 }, ""},
		{"endpoints", map[string]string{"TORTURE_ENDPOINTS": "1"}, func(c config) bool {
			return c.Endpoints && c.EndpointCount == 50 && c.Tenants == 20
		}, ""},
		{"endpoints not a boolean", map[string]string{"TORTURE_ENDPOINTS": "yes please"}, nil, "TORTURE_ENDPOINTS"},
		{"endpoints with a broker", map[string]string{"TORTURE_ENDPOINTS": "1", "TORTURE_SINK": "nats"}, nil, "run them apart"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
}

// The schedule is a function of the seed, and its first faults are every kind once.
func TestPlanIsSeededAndCoversEveryKind(t *testing.T) {
	a, b := newPlan(99, time.Second, 4*time.Second), newPlan(99, time.Second, 4*time.Second)
	seen := map[faultKind]bool{}
	for i := 0; i < 200; i++ {
		fa, fb := a.next(), b.next()
		if fa != fb {
			t.Fatalf("fault %d: %+v and %+v from the same seed", i, fa, fb)
		}
		if i < int(faultKinds) {
			if seen[fa.Kind] {
				t.Fatalf("fault %d repeats %s before every kind ran once", i, fa.Kind)
			}
			seen[fa.Kind] = true
		}
		if fa.Gap < time.Second || fa.Gap >= 4*time.Second {
			t.Fatalf("gap %s outside [1s, 4s)", fa.Gap)
		}
		if fa.Kind.receiverMode() != modeNormal && (fa.Share < 0.3 || fa.Share > 1 || fa.Hold < 500*time.Millisecond) {
			t.Fatalf("receiver fault %+v", fa)
		}
	}
	other := newPlan(100, time.Second, 4*time.Second)
	same := true
	c := newPlan(99, time.Second, 4*time.Second)
	for i := 0; i < 20; i++ {
		if other.next() != c.next() {
			same = false
		}
	}
	if same {
		t.Fatal("seeds 99 and 100 give the same schedule")
	}
}

// An endpoints run's plan leaves out the kinds it cannot check, and still runs every other
// kind once before any repeats.
func TestPlanWithoutKinds(t *testing.T) {
	p := newPlan(7, time.Second, 2*time.Second).withoutKinds(endpointsSkip...)
	seen := map[faultKind]bool{}
	want := int(faultKinds) - len(endpointsSkip)
	for i := 0; i < 300; i++ {
		f := p.next()
		for _, k := range endpointsSkip {
			if f.Kind == k {
				t.Fatalf("fault %d is %s, which the plan leaves out", i, k)
			}
		}
		if i < want {
			if seen[f.Kind] {
				t.Fatalf("fault %d repeats %s before every kind ran once", i, f.Kind)
			}
			seen[f.Kind] = true
		}
	}
}
