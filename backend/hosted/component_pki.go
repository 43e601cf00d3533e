package hosted

import (
	"context"
	"time"

	"k8s.io/client-go/rest"

	"github.com/openmcp-local/cluster-provider/backend"
)

// pkiComponent makes the control plane's CAs, keys and certificates (pki.go) at every Ensure: a
// certificate due for renewal, or a deleted leaf Secret, is made anew now, and the Ensure comes
// back when the first is due. It comes before the workloads, so the API server's first pod
// template carries the certificates' checksum it keeps.
type pkiComponent struct{}

func (pkiComponent) name() string { return "pki" }

func (pkiComponent) step(ctx context.Context, sc *scope) (result, error) {
	b, h, s := sc.b, sc.h, sc.s
	p, err := ensurePKI(ctx, h.memo, s, ServingHosts(s.Namespace, s.ServiceCIDR, []string{sc.ps.ExternalHost}), b.opts.Certificates)
	if err != nil {
		return result{}, err
	}
	backend.RecordCertificates(backend.RefOf(sc.cl), p.NotAfter)
	// The hosted CAs are not rotated: "current" is the cluster CA, "etcd" etcd's.
	backend.RecordCAs(backend.RefOf(sc.cl), map[string]time.Time{"current": p.ca.Cert.NotAfter, "etcd": p.etcdCA.Cert.NotAfter})
	s.Certificates = p.Checksum
	sc.pki = p
	sc.admin = adminConfig(h, s.Namespace, sc.external, p)
	b.mu.Lock()
	b.admin[sc.cl.UID] = sc.admin
	b.mu.Unlock()
	// Back in time to renew the first certificate due.
	return result{retry: max(time.Until(p.RenewAt), time.Second)}, nil
}

// adminConfig is the operator's rest.Config for a control plane: the internal endpoint when the
// operator runs in the host cluster, else the external one.
func adminConfig(h *host, namespace, external string, p *pki) *rest.Config {
	cfg := &rest.Config{Host: external, TLSClientConfig: rest.TLSClientConfig{CAData: p.ca.CertPEM, CertData: p.AdminCert, KeyData: p.AdminKey},
		QPS: -1, Timeout: 30 * time.Second}
	if h.internal {
		cfg.Host = internalURL(namespace)
	}
	return cfg
}
