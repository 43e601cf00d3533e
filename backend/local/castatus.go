package local

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
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
	return certificatesPart(now, in.pki.rotation, in.pki.CANotAfter, in.pki.ca.Lifetime, in.caErr)
}

// certificatesPart says where a cluster's CA is: valid until when and rotated from when on, in
// which phase of a rotation and until when, or why its renewal failed. caNotAfter holds the ends
// of the CAs by role (caCurrent, caNext, caPrevious).
func certificatesPart(now time.Time, r caRotation, caNotAfter map[string]time.Time, life certs.Lifetime, caErr string) backend.Part {
	p := backend.Part{Type: backend.PartCertificates, Ready: true}
	cur := caNotAfter[caCurrent]
	switch {
	case !now.Before(cur):
		p.Ready, p.Reason = false, backend.ReasonCAExpired
		p.Message = fmt.Sprintf("The cluster CA ended at %s: no certificate it signed verifies. Create a new Cluster and move the workloads.", rfc(cur))
	case caErr != "":
		p.Ready, p.Reason = false, backend.ReasonCARotationFailed
		p.Message = fmt.Sprintf("Renewing the cluster's certificates or rotating its CA failed (tried again at every health check): %s. The signing CA ends at %s.", caErr, rfc(cur))
	case r.Phase == phaseTrusting:
		p.Reason = backend.ReasonCARotating
		p.Message = fmt.Sprintf("CA rotation, phase 1 of 3 (Trusting) since %s: the trust bundle holds the old CA (ends %s) and a new one (ends %s); "+
			"the AccessRequests' kubeconfigs are issued anew with it. The new CA signs the API server's certificate from %s on: a kubeconfig copied before %s must be fetched again by then.",
			rfc(r.Since), rfc(cur), rfc(caNotAfter[caNext]), rfc(r.nextAt(cur, life)), rfc(r.Since))
	case r.Phase == phaseSigning:
		p.Reason = backend.ReasonCARotating
		p.Message = fmt.Sprintf("CA rotation, phase 2 of 3 (Signing) since %s: the new CA (ends %s) signs every certificate of the control plane; "+
			"the old CA (ends %s) stays in the trust bundle until %s.", rfc(r.Since), rfc(cur), rfc(caNotAfter[caPrevious]), rfc(r.nextAt(cur, life)))
	case r.Rotations > 0:
		p.Reason = backend.ReasonCARotated
		p.Message = fmt.Sprintf("The cluster CA was rotated at %s (%d rotations): the new CA alone is trusted, valid until %s; its rotation starts at %s.",
			rfc(r.RotatedAt), r.Rotations, rfc(cur), rfc(r.nextAt(cur, life)))
	default:
		p.Reason = backend.ReasonCAValid
		p.Message = fmt.Sprintf("The cluster CA is valid until %s; its rotation starts at %s.", rfc(cur), rfc(r.nextAt(cur, life)))
	}
	return p
}

// rfc formats t for a message.
func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }
