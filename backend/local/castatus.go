package local

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
)

// trustPool is the pool of the CAs of the PEM bundle.
func trustPool(bundle []byte) (*x509.CertPool, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return nil, errors.New("the cluster's CA bundle does not read")
	}
	return roots, nil
}

// dialTLS connects the probe to addr, verifying the server with the trust bundle of the moment
// and presenting the admin certificate of the moment.
func (in *instance) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	bundle := in.pki.CAPEM
	in.mu.Unlock()
	roots, err := trustPool(bundle)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			in.mu.Lock()
			certPEM, keyPEM := in.pki.AdminCertPEM, in.pki.AdminKeyPEM
			in.mu.Unlock()
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			return &pair, err
		}}}
	return d.DialContext(ctx, network, addr)
}

// setCAError records why the last renewal or CA rotation step failed, and tells the reconciler.
func (in *instance) setCAError(err error) {
	in.mu.Lock()
	changed := in.caErr != err.Error()
	in.caErr = err.Error()
	in.mu.Unlock()
	if changed {
		in.b.notify(in)
	}
}

// certificatesPartLocked is the CertificatesValid part of the cluster: where its CA and the CA's
// rotation are. in.mu is held.
func (in *instance) certificatesPartLocked(now time.Time) backend.Part {
	return backend.CertificatesPart(now, in.pki.rotation, in.pki.CANotAfter, in.pki.ca.Lifetime, in.caErr)
}
