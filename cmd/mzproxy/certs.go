package main

import (
	"crypto/tls"
	"sync/atomic"
)

// certificate is the TLS certificate offered to clients. SIGHUP loads it
// again from its files, so a renewed certificate is served to new
// connections without a restart; connections already encrypted keep
// theirs.
type certificate struct {
	current atomic.Pointer[tls.Certificate]
}

// load reads the certificate and key files; on error the one served stays.
func (c *certificate) load(certFile, keyFile string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	c.current.Store(&cert)
	return nil
}

// tlsConfig is the server configuration that serves the current
// certificate.
func (c *certificate) tlsConfig() *tls.Config {
	return &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.current.Load(), nil },
		MinVersion:     tls.VersionTLS12,
	}
}
