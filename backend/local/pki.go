package local

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/openmcp-local/cluster-provider/backend/authconfig"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// Files of a cluster's pki folder. Keys are written 0600, certificates 0644.
const (
	caCertFile      = "ca.crt"
	caKeyFile       = "ca.key"
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	adminCertFile   = "admin.crt"
	adminKeyFile    = "admin.key"
	saKeyFile       = "sa.key"
	saPubFile       = "sa.pub"
	// The controller manager's client certificate (its identity in the cluster) and serving
	// certificate (its health and metrics port on the loopback).
	kcmClientCertFile  = "kube-controller-manager.crt"
	kcmClientKeyFile   = "kube-controller-manager.key"
	kcmServingCertFile = "kube-controller-manager-serving.crt"
	kcmServingKeyFile  = "kube-controller-manager-serving.key"
)

// The identities of the client certificates in every local cluster: the operator's and the
// controller manager's (bound by the API server's bootstrap RBAC policy).
const (
	adminUser  = "openmcp:cluster-provider"
	adminGroup = "system:masters"
	kcmUser    = "system:kube-controller-manager"
)

// The leaf certificates of every local cluster, issued by backend/certs. The client certificates
// are kept while the CA can keep them (certs.CA.Keep); the serving certificates are issued at every
// load, the API server's for the hosts of that moment.
var (
	adminLeaf = certs.Leaf{CommonName: adminUser, Organization: []string{adminGroup}, Usages: clientAuth}
	kcmLeaf   = certs.Leaf{CommonName: kcmUser, Usages: clientAuth}
	// The controller manager serves its health and metrics port on the loopback only.
	kcmServingLeaf = certs.Leaf{CommonName: "kube-controller-manager", Hosts: []string{"127.0.0.1", "localhost"}, Usages: serverAuth}

	clientAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	serverAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	// kubernetesNames are the in-cluster names of the kubernetes Service: names of the API server.
	kubernetesNames = []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
)

// Lifetimes (certs.Lifetime, Options.Certificates). The CA is valid 10 years and rotated from a
// year before its end on (carotation.go); leaf certificates are valid a year by default, never
// past their CA's end, and issued anew when they are due (30 days before their end, or when a
// rotation replaces the CA that signed them): the serving certificates at every start of the
// cluster's processes too, and while the cluster runs by its instance (renewIfDue).

// pki is the certificate authority of one cluster, kept in the files of its folder dir, and what
// the operator needs of it.
type pki struct {
	dir string
	ca  *certs.CA
	// CAPEM verifies the API server's serving certificate.
	CAPEM []byte
	// AdminCertPEM and AdminKeyPEM authenticate the operator as adminUser in system:masters.
	AdminCertPEM, AdminKeyPEM []byte
	// KCMCertPEM and KCMKeyPEM authenticate the controller manager as kcmUser.
	KCMCertPEM, KCMKeyPEM []byte
	// NotAfter is when each leaf ends, by its file's name; RenewAt when the first of them is due
	// or the CA rotation moves on, whichever comes first.
	NotAfter map[string]time.Time
	RenewAt  time.Time
	// CANotAfter is when each CA of the trust bundle ends, by its role (backend.CACurrent, backend.CANext,
	// backend.CAPrevious); rotation is where the CA's rotation is.
	CANotAfter map[string]time.Time
	rotation   certs.Rotation
}

// loadOrCreatePKI reads the cluster's CA, client certificates and service-account key pair from
// dir, creating whatever is missing or due, and issues the serving certificates anew, the API
// server's for hosts (IP addresses or DNS names) and the kubernetes Service's names. Leaves are
// valid for life.
func loadOrCreatePKI(dir string, hosts []string, life certs.Lifetime) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir, NotAfter: map[string]time.Time{}, CANotAfter: map[string]time.Time{}}
	if err := p.loadOrCreateCA(life.Or()); err != nil {
		return nil, fmt.Errorf("the cluster CA in %s: %w", dir, err)
	}
	if err := p.ensureSAKeys(); err != nil {
		return nil, fmt.Errorf("the service-account keys in %s: %w", dir, err)
	}
	var err error
	if p.AdminCertPEM, p.AdminKeyPEM, err = p.keepOrIssue(adminCertFile, adminKeyFile, adminLeaf); err != nil {
		return nil, fmt.Errorf("the admin certificate in %s: %w", dir, err)
	}
	if p.KCMCertPEM, p.KCMKeyPEM, err = p.keepOrIssue(kcmClientCertFile, kcmClientKeyFile, kcmLeaf); err != nil {
		return nil, fmt.Errorf("the controller manager's certificate in %s: %w", dir, err)
	}
	serving := certs.Leaf{CommonName: "kube-apiserver", Hosts: append(slices.Clone(kubernetesNames), hosts...), Usages: serverAuth}
	if _, _, err := p.issue(servingCertFile, servingKeyFile, serving); err != nil {
		return nil, fmt.Errorf("the serving certificate in %s: %w", dir, err)
	}
	if _, _, err := p.issue(kcmServingCertFile, kcmServingKeyFile, kcmServingLeaf); err != nil {
		return nil, fmt.Errorf("the controller manager's serving certificate in %s: %w", dir, err)
	}
	if at := p.rotation.NextAt(p.ca.Cert.NotAfter, life); at.Before(p.RenewAt) {
		p.RenewAt = at
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// caCommonName names every CA of a local cluster; two of them in a trust bundle are told apart by
// their key IDs.
const caCommonName = "local-cluster-ca"

// loadOrCreateCA loads the cluster's signing CA, or creates one when neither of its files exists,
// moves its rotation (carotation.go) on when its time has come, and writes the trust bundle of
// the rotation's phase. A CA file that exists but does not load is damaged: every certificate and
// kubeconfig of the cluster depends on it, so it is neither replaced nor touched, and the error
// (reason StateDamaged) says what a person can do.
func (p *pki) loadOrCreateCA(life certs.Lifetime) error {
	rec, err := p.readRotation()
	if err != nil {
		return damaged(p.dir, []string{caRotationFile}, err, "It records where the rotation of the cluster's CA is",
			"or remove it: the rotation is taken up again from the CA files (a CA made for it and not signing yet is made anew)")
	}
	if rec.Phase == certs.PhaseSigning {
		if err := p.finishSwap(); err != nil {
			return err
		}
	}
	created, err := p.loadSigningCA(life)
	if err != nil {
		return err
	}
	if created {
		// A new CA starts without a rotation; what an earlier one left goes.
		rec = certs.Rotation{}
		if err := removeFiles(p.path(caRotationFile), p.path(caNextCertFile), p.path(caNextKeyFile), p.path(caOldCertFile)); err != nil {
			return err
		}
	}
	p.ca.Lifetime = life
	if next := rec.Advance(time.Now(), p.ca.Cert.NotAfter, life); next.Phase != rec.Phase {
		if err := p.step(rec.Phase, next, life); err != nil {
			return fmt.Errorf("moving the CA rotation to phase %q: %w", next.Phase, err)
		}
		rec = next
		if rec.Phase == certs.PhaseSigning {
			if _, err := p.loadSigningCA(life); err != nil {
				return err
			}
			p.ca.Lifetime = life
		}
	}
	p.rotation = rec
	p.ca.ReplacedAt = rec.ReplacedAt(p.ca.Cert.NotAfter, life)
	return p.writeBundle(life)
}

// loadSigningCA loads the CA of ca.crt and ca.key into p.ca, creating it, valid for life's
// CAValidity, when neither file exists (created).
func (p *pki) loadSigningCA(life certs.Lifetime) (created bool, err error) {
	certPEM, certErr := os.ReadFile(p.path(caCertFile))
	keyPEM, keyErr := os.ReadFile(p.path(caKeyFile))
	if errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist) {
		if p.ca, err = certs.NewCAValid(caCommonName, life.Or().CAValidity); err != nil {
			return false, err
		}
		return true, p.write(caCertFile, caKeyFile, p.ca.CertPEM, p.ca.KeyPEM)
	}
	if p.ca, err = loadCA(certPEM, certErr, keyPEM, keyErr); err != nil {
		return false, damaged(p.dir, []string{caCertFile, caKeyFile}, err,
			"Every certificate of the cluster and every kubeconfig granted for it depend on this CA",
			"or remove both files to make a new CA: the cluster keeps its data, kubeconfigs granted before stop working and the AccessRequests are granted again")
	}
	return false, nil
}

// loadCA reads the CA from its files' contents (read with certErr and keyErr); the error names
// the file at fault.
func loadCA(certPEM []byte, certErr error, keyPEM []byte, keyErr error) (*certs.CA, error) {
	if certErr != nil {
		return nil, certErr
	}
	if keyErr != nil {
		return nil, keyErr
	}
	ca, err := certs.ParseCA(certPEM, keyPEM)
	var caErr *certs.CAError
	switch {
	case err == nil:
		return ca, nil
	case errors.As(err, &caErr) && caErr.Key:
		return nil, fmt.Errorf("%s and %s do not belong together: %w", caCertFile, caKeyFile, err)
	default:
		return nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
}

// ensureSAKeys creates the key pair that signs and verifies service-account tokens when neither
// file exists, and writes the public key anew from the private one when only it is missing or
// damaged. A damaged private key is not replaced: every token granted in the cluster was signed
// with it.
func (p *pki) ensureSAKeys() error {
	keyPEM, keyErr := os.ReadFile(p.path(saKeyFile))
	var pubPEM []byte
	switch {
	case errors.Is(keyErr, os.ErrNotExist):
		if _, err := os.Stat(p.path(saPubFile)); err == nil {
			keyErr = errors.New(saKeyFile + " is missing but " + saPubFile + " exists")
			break
		}
		var err error
		if keyPEM, pubPEM, err = certs.NewServiceAccountKey(); err != nil {
			return err
		}
		if err := writeFileAtomic(p.path(saKeyFile), keyPEM, 0o600); err != nil {
			return err
		}
		keyErr = nil
	case keyErr == nil:
		pubPEM, keyErr = certs.ServiceAccountPublicKey(keyPEM)
	}
	if keyErr != nil {
		return damaged(p.dir, []string{saKeyFile}, keyErr,
			"Every service-account token of the cluster, those of token AccessRequests among them, was signed with this key",
			"or remove "+saKeyFile+" and "+saPubFile+" to make a new key pair: the cluster keeps its data, tokens issued before stop working")
	}
	if got, err := os.ReadFile(p.path(saPubFile)); err == nil && bytes.Equal(got, pubPEM) {
		return nil
	}
	return writeFileAtomic(p.path(saPubFile), pubPEM, 0o644)
}

// keepOrIssue returns the pair in certFile and keyFile when the CA can keep it for l (it reads,
// the CA signed it for l's subject and usages, and it is not due), and issues a new one otherwise.
func (p *pki) keepOrIssue(certFile, keyFile string, l certs.Leaf) (certPEM, keyPEM []byte, err error) {
	certPEM, certErr := os.ReadFile(p.path(certFile))
	keyPEM, keyErr := os.ReadFile(p.path(keyFile))
	if certErr == nil && keyErr == nil && p.ca.Keep(certPEM, keyPEM, l) {
		return certPEM, keyPEM, p.ended(certFile, certPEM)
	}
	return p.issue(certFile, keyFile, l)
}

// issue issues a new certificate for l and writes it and its key to certFile and keyFile.
func (p *pki) issue(certFile, keyFile string, l certs.Leaf) (certPEM, keyPEM []byte, err error) {
	if certPEM, keyPEM, err = p.ca.Issue(l); err != nil {
		return nil, nil, err
	}
	if err := p.write(certFile, keyFile, certPEM, keyPEM); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, p.ended(certFile, certPEM)
}

// ended records when the leaf certPEM of certFile ends, and when the first leaf is due.
func (p *pki) ended(certFile string, certPEM []byte) error {
	t, err := certs.NotAfter(certPEM)
	if err != nil {
		return err
	}
	p.NotAfter[certFile] = t
	if at := p.ca.LeafRenewAt(t); p.RenewAt.IsZero() || at.Before(p.RenewAt) {
		p.RenewAt = at
	}
	return nil
}

// write writes a key (0600) and then its certificate (0644).
func (p *pki) write(certFile, keyFile string, certPEM, keyPEM []byte) error {
	if err := writeFileAtomic(p.path(keyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(p.path(certFile), certPEM, 0o644)
}

// writeFileAtomic writes data to path through a temporary file in the same folder and a rename,
// so that a reader (or a crash) never sees a half-written file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return authconfig.WriteFileAtomic(path, data, perm)
}
