package hosted

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// pkiComponent makes the control plane's CAs, keys and certificates (pki.go) at every Ensure: a
// certificate due for renewal, or a deleted leaf Secret, is made anew now, and the Ensure comes
// back when the first is due. It comes before the workloads, so the API server's first pod
// template carries the certificates' checksum it keeps.
type pkiComponent struct{}

func (pkiComponent) name() string { return "pki" }

func (pkiComponent) step(ctx context.Context, sc *scope) (result, error) {
	b, h, s := sc.b, sc.h, sc.s
	settled := func(trust string) string { return trustSettled(ctx, h, s, trust) }
	p, err := ensurePKI(ctx, h.memo, s, ServingHosts(s.Namespace, s.ServiceCIDR, []string{sc.ps.ExternalHost}), b.opts.Certificates, settled)
	if err != nil {
		return result{}, err
	}
	ref := backend.RefOf(sc.cl)
	backend.RecordCertificates(ref, p.NotAfter)
	backend.RecordCAs(ref, p.caEnds())
	s.Certificates, s.Trust = p.Checksum, p.Trust
	sc.pki = p
	sc.admin = adminConfig(h, s.Namespace, sc.external, p.cluster.bundle(), p.AdminCert, p.AdminKey)
	b.mu.Lock()
	b.admin[sc.cl.UID] = sc.admin
	b.mu.Unlock()
	// Back in time to renew the first certificate due, or to move a CA rotation on; while a
	// rotation waits for the workloads to roll, soon.
	next := p.RenewAt
	for _, r := range []*rotatingCA{p.cluster, p.etcd} {
		if at := r.rotation.NextAt(r.ca.Cert.NotAfter, r.ca.Lifetime); at.Before(next) {
			next = at
		}
	}
	retry := max(time.Until(next), time.Second)
	if p.Held != "" {
		retry = min(retry, 10*time.Second)
	}
	return result{retry: retry}, nil
}

// caEnds are the ends of the CAs of both trust bundles by role, for the CA expiry metric: the
// cluster CA's as backend.CACurrent, CANext and CAPrevious, etcd's prefixed "etcd" ("etcd" is
// its signing CA).
func (p *pki) caEnds() map[string]time.Time {
	ends := p.cluster.notAfter()
	for role, end := range p.etcd.notAfter() {
		if role == backend.CACurrent {
			ends["etcd"] = end
			continue
		}
		ends["etcd-"+role] = end
	}
	return ends
}

// certificatesPart is the CertificatesValid part of the control plane: where the cluster CA and
// its rotation are, with etcd's CA's rotation and what holds a rotation added when there is one.
func (p *pki) certificatesPart(now time.Time) backend.Part {
	part := backend.CertificatesPart(now, p.cluster.rotation, p.cluster.notAfter(), p.ca.Lifetime, "")
	if e := p.etcd.rotation; e.Phase != certs.PhaseNone {
		part.Message += fmt.Sprintf(" etcd's CA: rotation phase %s since %s.", e.Phase, e.Since.UTC().Format(time.RFC3339))
	}
	if p.Held != "" {
		part.Message += " The rotation's next phase waits for " + p.Held + "."
	}
	return part
}

// adminConfig is the operator's rest.Config for a control plane: the internal endpoint when the
// operator runs in the host cluster, else the external one.
func adminConfig(h *host, namespace, external string, caBundle, cert, key []byte) *rest.Config {
	cfg := &rest.Config{Host: external, TLSClientConfig: rest.TLSClientConfig{CAData: caBundle, CertData: cert, KeyData: key},
		QPS: -1, Timeout: 30 * time.Second}
	if h.internal {
		cfg.Host = internalURL(namespace)
	}
	return cfg
}
