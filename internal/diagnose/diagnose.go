// Package diagnose says what a failed connection to PostgreSQL means and what fixes it, for the
// relay's log, its /readyz and the CLI's last line.
//
// # One cause, not every attempt
//
// pgconn reports a failed connection as one error that joins every attempt it made. With the
// default sslmode=prefer it first tries TLS, and against a server without TLS that attempt
// fails ("server refused TLS connection") before the plain one meets the real cause (a missing
// database, say): the first line a user reads is the one that does not matter. Connect picks the
// attempt that says most, in this order: the server's own refusal (a *pgconn.PgError, classified
// by its SQLSTATE), a host name that does not resolve, a refused connection, an untrusted
// certificate, and last a server that refused TLS.
//
// # Configuration or outage
//
// A Problem is a configuration error (Config) when no retry can succeed until someone changes
// something: the database or the role does not exist, the password is wrong, the role may not
// connect, the host name does not resolve, the connection requires TLS and the server offers
// none or a certificate it cannot verify. A refused connection is both: PostgreSQL restarting
// refuses for a few seconds, a wrong port for ever; a Watch counts it as a configuration error
// once it has persisted for RefusedFor. Anything else (the server starting up, too many
// connections, a timeout) is an outage, reported with the cleaned message and no fix.
//
// The texts name the connection string, never a flag or variable of a command line: the caller
// that has one adds it.
package diagnose

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Kind is what went wrong.
type Kind int

// The kinds of failed connections Connect tells apart.
const (
	// Outage is a failure a retry may overcome by itself: the server starting up or shutting
	// down, too many connections, a timeout, a reset connection.
	Outage Kind = iota
	// Refused is a refused TCP connection: nothing listens at the address (yet).
	Refused
	// UnknownHost is a host name that does not resolve.
	UnknownHost
	// NoTLS is a connection that requires TLS to a server that offers none.
	NoTLS
	// Certificate is a TLS handshake that failed on the server's certificate.
	Certificate
	// NoDatabase is a database that does not exist (SQLSTATE 3D000).
	NoDatabase
	// Password is a password the server refused (SQLSTATE 28P01).
	Password
	// Authorization is a role the server refused (SQLSTATE class 28 other than 28P01: the role
	// does not exist, or no pg_hba.conf line lets it in).
	Authorization
	// Permission is a role that may not connect to the database, or not replicate (SQLSTATE
	// 42501 while connecting).
	Permission
)

// Problem is a failed connection, diagnosed. Error reads "cannot connect to the database at
// ADDR: CAUSE; FIX"; Unwrap returns the connection's error, so errors.As still finds the
// *pgconn.PgError.
type Problem struct {
	Kind  Kind
	Addr  string // host:port (or socket directory) the connection string names
	Cause string // what is wrong, in one clause
	Fix   string // what to do; empty for an outage
	err   error
}

func (p *Problem) Error() string {
	msg := "cannot connect to the database at " + p.Addr + ": " + p.Cause
	if p.Fix != "" {
		msg += "; " + p.Fix
	}
	return msg
}

// Unwrap returns the error of the connection attempt.
func (p *Problem) Unwrap() error { return p.err }

// Config reports whether the problem is in the configuration (of the connection string, the
// server, or its roles) whatever the time: every kind but Outage and Refused. A refused
// connection becomes one once it persists (Watch).
func (p *Problem) Config() bool { return p.Kind != Outage && p.Kind != Refused }

// Connect diagnoses err when it is (or wraps) a failed connection, a *pgconn.ConnectError; ok is
// false for any other error.
func Connect(err error) (p *Problem, ok bool) {
	if err == nil {
		return nil, false
	}
	if errors.As(err, &p) {
		return p, true // diagnosed already
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Config == nil {
		return nil, false
	}
	c := ce.Config
	p = &Problem{Addr: address(c.Host, c.Port), err: err}
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	switch {
	case errors.As(ce, &pgErr):
		server(p, pgErr, c)
	case errors.As(ce, &dnsErr) && dnsErr.IsNotFound:
		p.Kind, p.Cause = UnknownHost, fmt.Sprintf("host %q is not found (%v)", dnsErr.Name, dnsErr.Err)
		p.Fix = "correct the host in the connection string"
	case errors.Is(ce, syscall.ECONNREFUSED), strings.HasPrefix(c.Host, "/") && errors.Is(ce, syscall.ENOENT):
		p.Kind, p.Cause = Refused, "the connection is refused: nothing listens there"
		p.Fix = "check the host and port in the connection string, and that PostgreSQL runs there and listens on that " +
			"address (listen_addresses and port in postgresql.conf); a server that is restarting refuses only for a moment"
	case certificate(ce):
		p.Kind, p.Cause = Certificate, "the server's TLS certificate cannot be verified ("+leaf(ce).Error()+")"
		p.Fix = "give the CA that signed it (sslrootcert=... in the connection string), or use the host name the " +
			"certificate names (sslmode=verify-full checks it); sslmode=require encrypts without verifying"
	case tlsRefused(ce):
		p.Kind, p.Cause = NoTLS, "the connection string requires TLS (sslmode=require, verify-ca or verify-full) "+
			"and the server offers none"
		p.Fix = "turn ssl on in the server's postgresql.conf, or, on a network you trust, set sslmode=prefer or " +
			"sslmode=disable in the connection string"
	default:
		p.Kind, p.Cause = Outage, leaf(ce).Error()
	}
	return p, true
}

// server classifies the server's refusal by its SQLSTATE.
func server(p *Problem, e *pgconn.PgError, c *pgconn.Config) {
	p.Cause = fmt.Sprintf("%s (SQLSTATE %s)", e.Message, e.Code)
	switch {
	case e.Code == pgerrcode.InvalidCatalogName:
		p.Kind = NoDatabase
		p.Fix = fmt.Sprintf("create it (CREATE DATABASE %s) or correct the database name in the connection string", ident(c.Database))
	case e.Code == pgerrcode.InvalidPassword:
		p.Kind = Password
		p.Fix = fmt.Sprintf("correct the password of role %q in the connection string (or PGPASSWORD, ~/.pgpass)", c.User)
	case pgerrcode.IsInvalidAuthorizationSpecification(e.Code):
		p.Kind = Authorization
		p.Fix = fmt.Sprintf("create the role (CREATE ROLE %s LOGIN REPLICATION) or correct the user in the connection "+
			"string; if it exists, let it in from this host in pg_hba.conf, for database %s and for replication "+
			"connections", ident(c.User), ident(c.Database))
	case e.Code == pgerrcode.InsufficientPrivilege:
		p.Kind = Permission
		p.Fix = fmt.Sprintf("as a superuser: GRANT CONNECT ON DATABASE %s TO %s; and for the replication connection "+
			"ALTER ROLE %s REPLICATION", ident(c.Database), ident(c.User), ident(c.User))
	default:
		p.Kind = Outage // 57P03 the server is starting up, 53300 too many connections, ...
	}
}

// certificate reports whether a TLS handshake failed on the server's certificate.
func certificate(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

// refusedTLS is pgconn's error when the server answers its SSLRequest with "N". pgconn gives
// it neither a type nor a code, so it is recognised by its text, the one match by text here;
// TestDiagnoseWithRealServers fails if a pgx upgrade changes it.
const refusedTLS = "server refused TLS connection"

// tlsRefused reports whether an attempt of err failed because the server offers no TLS.
func tlsRefused(err error) bool {
	found := false
	walk(err, func(e error) {
		if e.Error() == refusedTLS {
			found = true
		}
	})
	return found
}

// leaf returns the innermost error of the first attempt that is not a refused TLS request (of
// the first attempt when all are): the cause without the wrapping that repeats the address.
func leaf(err error) error {
	var first, chosen error
	walk(err, func(e error) {
		if first == nil {
			first = e
		}
		if chosen == nil && e.Error() != refusedTLS {
			chosen = e
		}
	})
	switch {
	case chosen != nil:
		return chosen
	case first != nil:
		return first
	}
	return err
}

// walk calls f with the innermost error of each branch of err's tree, depth first: an attempt of
// a joined error, unwrapped to its end.
func walk(err error, f func(error)) {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walk(e, f)
		}
		return
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			walk(inner, f)
			return
		}
	}
	f(err)
}

func address(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return filepath.Join(host, ".s.PGSQL."+strconv.Itoa(int(port))) // a socket directory
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// ident quotes name as an SQL identifier when it needs it.
func ident(name string) string {
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
		}
	}
	if name == "" {
		return `""`
	}
	return name
}

// DSNFix says how to fix a connection string pgconn cannot parse (its *pgconn.ParseConfigError
// echoes the string with the password masked, and the reason): a URL whose scheme is not
// postgres:// or postgresql:// is read as key=value pairs, so the scheme is named; otherwise
// the two forms that parse.
func DSNFix(err *pgconn.ParseConfigError) string {
	if scheme, _, url := strings.Cut(err.ConnString, "://"); url && scheme != "postgres" && scheme != "postgresql" &&
		!strings.ContainsAny(scheme, " =") {
		return fmt.Sprintf("it begins with %q: a URL begins with postgres:// or postgresql://", scheme+"://")
	}
	return "give a URL (postgres://user:password@host:5432/dbname) or key=value pairs (host=... dbname=...)"
}

// RefusedFor is how long a refused connection must go on before a Watch counts it as a
// configuration error: longer than PostgreSQL takes to restart or fail over.
const RefusedFor = time.Minute

// Watch follows the failed attempts of one retried step and says when they are a configuration
// error: a Problem whose Config is true at once, a refused connection once it has been refused
// for RefusedFor without a success or another error between. The zero value is ready; it is
// not safe for concurrent use.
type Watch struct {
	refusedSince time.Time
	now          func() time.Time // nil: time.Now; set by tests
}

// Config reports whether err, the last failed attempt, is a configuration error now.
func (w *Watch) Config(err error) bool {
	p, ok := Connect(err)
	if !ok || p.Kind != Refused {
		w.refusedSince = time.Time{}
		return ok && p.Config()
	}
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	if w.refusedSince.IsZero() {
		w.refusedSince = now()
	}
	return now().Sub(w.refusedSince) >= RefusedFor
}
