package main

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"DB_DSN": "postgres://env/db", "WEBHOOK_SECRET": "new, old"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	noEnv := func(string) (string, bool) { return "", false }
	cases := []struct {
		name    string
		args    []string
		lookup  func(string) (string, bool)
		want    config
		wantErr bool
	}{
		{name: "environment", lookup: lookup,
			want: config{dsn: "postgres://env/db", listen: "127.0.0.1:8080", secrets: []string{"new", "old"}}},
		{name: "flags win", args: []string{"--dsn", "postgres://flag/db", "--webhook-secret", "s", "--listen", ":9000", "--retention", "720h"},
			lookup: lookup, want: config{dsn: "postgres://flag/db", listen: ":9000", secrets: []string{"s"}, retention: 720 * time.Hour}},
		{name: "no dsn", args: []string{"--webhook-secret", "s"}, lookup: noEnv, wantErr: true},
		{name: "no secret", args: []string{"--dsn", "postgres://x/db"}, lookup: noEnv, wantErr: true},
		{name: "stray argument", args: []string{"serve"}, lookup: lookup, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseConfig(c.args, c.lookup)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, c.wantErr)
			}
			if !c.wantErr && !reflect.DeepEqual(got, c.want) {
				t.Fatalf("config = %+v, want %+v", got, c.want)
			}
		})
	}
	if _, err := parseConfig([]string{"--help"}, noEnv); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
}
