// Package pgtest gives each test package a throwaway PostgreSQL cluster: Main starts one for the
// package's tests, NewDB makes a fresh database on it for each test. The clusters themselves come
// from package pgcluster (see there for how the server is found, run as root, and reached through
// its own Unix socket); the names below forward to it so that callers need one import.
//
// This package imports testing: code the relay ships must use pgcluster, never pgtest.
package pgtest

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/pgcluster"
)

// Cluster is a running (or stopped) throwaway PostgreSQL cluster.
type Cluster = pgcluster.Cluster

// Options tune a cluster. The zero value is ready to use.
type Options = pgcluster.Options

// InstallHint is the command that installs the server binaries on Debian and Ubuntu.
const InstallHint = pgcluster.InstallHint

// ErrNoBinaries is returned by Start when no PostgreSQL server binaries can be found.
var ErrNoBinaries = pgcluster.ErrNoBinaries

// Start initialises a new cluster in a temp dir and starts it; see pgcluster.Start.
func Start(ctx context.Context, opts Options) (*Cluster, error) { return pgcluster.Start(ctx, opts) }

// FindBinDir returns the directory that holds initdb and postgres; see pgcluster.FindBinDir.
func FindBinDir() (string, error) { return pgcluster.FindBinDir() }

// StandbyOptions tune Cluster.StartStandby; see pgcluster.StandbyOptions.
type StandbyOptions = pgcluster.StandbyOptions

// InstallVersionHint names the command that installs server binaries of major version v.
func InstallVersionHint(v string) string { return pgcluster.InstallVersionHint(v) }
