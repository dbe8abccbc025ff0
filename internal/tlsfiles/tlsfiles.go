// Package tlsfiles builds a client tls.Config from PEM files, as the broker destinations'
// `tls: {ca, cert, key}` settings name them.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Load returns a TLS 1.2+ client configuration: ca, if set, replaces the system roots; cert and
// key, if set, are the client certificate. who prefixes errors ("nats", "kafka").
func Load(who, ca, cert, key string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: tls.ca: %w", who, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: tls.ca %s holds no PEM certificate", who, ca)
		}
		tc.RootCAs = pool
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s: tls.cert/tls.key: %w", who, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}
