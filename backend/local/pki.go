package local

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

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

// Lifetimes. The CA (certutil's default, 10 years) outlives any cluster; leaf certificates are
// valid a year by default (Options.Certificates) and issued anew when they are due (30 days before
// their end): the serving certificates at every start of the cluster's processes too, and while
// the cluster runs by its instance (renewIfDue).

// pki is the certificate authority of one cluster and what the operator needs of it.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	// CAPEM verifies the API server's serving certificate.
	CAPEM []byte
	// AdminCertPEM and AdminKeyPEM authenticate the operator as adminUser in system:masters.
	AdminCertPEM, AdminKeyPEM []byte
	// KCMCertPEM and KCMKeyPEM authenticate the controller manager as kcmUser.
	KCMCertPEM, KCMKeyPEM []byte
	// life is the leaves' lifetime; NotAfter when each leaf ends, by its file's name; RenewAt
	// when the first of them is due.
	life     certs.Lifetime
	NotAfter map[string]time.Time
	RenewAt  time.Time
}

// ended records that the leaf certFile ends at t.
func (p *pki) ended(certFile string, t time.Time) {
	p.NotAfter[certFile] = t
	if at := p.life.RenewAt(t); p.RenewAt.IsZero() || at.Before(p.RenewAt) {
		p.RenewAt = at
	}
}

// loadOrCreatePKI reads the cluster's CA, admin certificate and service-account key pair from
// dir, creating whatever is missing, and (re-)issues the serving certificate for hosts. Keys are
// generated in-process (ECDSA P-256).
func loadOrCreatePKI(dir string, hosts []string, life certs.Lifetime) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir, life: life.Or(), NotAfter: map[string]time.Time{}}
	if err := p.loadOrCreateCA(); err != nil {
		return nil, fmt.Errorf("the cluster CA in %s: %w", dir, err)
	}
	if err := p.ensureSAKeys(); err != nil {
		return nil, fmt.Errorf("the service-account keys in %s: %w", dir, err)
	}
	var err error
	p.AdminCertPEM, p.AdminKeyPEM, err = p.loadOrIssue(adminCertFile, adminKeyFile, func() (*x509.Certificate, crypto.Signer, error) {
		return p.issue(pkix.Name{CommonName: adminUser, Organization: []string{adminGroup}}, nil, x509.ExtKeyUsageClientAuth)
	})
	if err != nil {
		return nil, fmt.Errorf("the admin certificate in %s: %w", dir, err)
	}
	p.KCMCertPEM, p.KCMKeyPEM, err = p.loadOrIssue(kcmClientCertFile, kcmClientKeyFile, func() (*x509.Certificate, crypto.Signer, error) {
		return p.issue(pkix.Name{CommonName: kcmUser}, nil, x509.ExtKeyUsageClientAuth)
	})
	if err != nil {
		return nil, fmt.Errorf("the controller manager's certificate in %s: %w", dir, err)
	}
	if err := p.issueServing(hosts); err != nil {
		return nil, fmt.Errorf("the serving certificate in %s: %w", dir, err)
	}
	kcmCert, kcmKey, err := p.issue(pkix.Name{CommonName: "kube-controller-manager"},
		&sans{ips: []net.IP{net.ParseIP("127.0.0.1")}, dns: []string{"localhost"}}, x509.ExtKeyUsageServerAuth)
	if err == nil {
		err = p.write(kcmServingCertFile, kcmServingKeyFile, kcmCert, kcmKey)
		p.ended(kcmServingCertFile, kcmCert.NotAfter)
	}
	if err != nil {
		return nil, fmt.Errorf("the controller manager's serving certificate in %s: %w", dir, err)
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// loadOrCreateCA loads the cluster's CA, or creates one when neither of its files exists. A CA
// file that exists but does not load is damaged: every certificate and kubeconfig of the cluster
// depends on it, so it is neither replaced nor touched, and the error (reason StateDamaged) says
// what a person can do.
func (p *pki) loadOrCreateCA() error {
	certPEM, certErr := os.ReadFile(p.path(caCertFile))
	_, keyErr := os.Stat(p.path(caKeyFile))
	if errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist) {
		return p.createCA()
	}
	ca, key, err := loadCA(certPEM, certErr, p.path(caKeyFile))
	if err != nil {
		return damaged(p.dir, []string{caCertFile, caKeyFile}, err,
			"Every certificate of the cluster and every kubeconfig granted for it depend on this CA",
			"or remove both files to make a new CA: the cluster keeps its data, kubeconfigs granted before stop working and the AccessRequests are granted again")
	}
	p.caCert, p.caKey, p.CAPEM = ca, key, certPEM
	return nil
}

// loadCA parses the CA certificate (read with certErr) and its key at keyPath, and checks that
// they belong together.
func loadCA(certPEM []byte, certErr error, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	if certErr != nil {
		return nil, nil, certErr
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, nil, fmt.Errorf("%s and %s do not belong together: %w", caCertFile, caKeyFile, err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New(caKeyFile + " holds no signing key")
	}
	return certs[0], signer, nil
}

func (p *pki) createCA() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "local-cluster-ca"}, caKey)
	if err != nil {
		return err
	}
	certPEM, err := certutil.EncodeCertificates(ca)
	if err != nil {
		return err
	}
	if err := writeKey(p.path(caKeyFile), caKey); err != nil {
		return err
	}
	if err := writeFileAtomic(p.path(caCertFile), certPEM, 0o644); err != nil {
		return err
	}
	p.caCert, p.caKey, p.CAPEM = ca, caKey, certPEM
	return nil
}

// ensureSAKeys creates the key pair that signs and verifies service-account tokens when neither
// file exists, and writes the public key anew from the private one when only it is missing or
// damaged. A damaged private key is not replaced: every token granted in the cluster was signed
// with it.
func (p *pki) ensureSAKeys() error {
	keyPEM, keyErr := os.ReadFile(p.path(saKeyFile))
	var key crypto.Signer
	switch {
	case errors.Is(keyErr, os.ErrNotExist):
		if _, err := os.Stat(p.path(saPubFile)); err == nil {
			keyErr = errors.New(saKeyFile + " is missing but " + saPubFile + " exists")
			break
		}
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		if err := writeKey(p.path(saKeyFile), k); err != nil {
			return err
		}
		key, keyErr = k, nil
	case keyErr == nil:
		parsed, err := keyutil.ParsePrivateKeyPEM(keyPEM)
		signer, ok := parsed.(crypto.Signer)
		switch {
		case err != nil:
			keyErr = fmt.Errorf("%s: %w", saKeyFile, err)
		case !ok:
			keyErr = errors.New(saKeyFile + " holds no signing key")
		default:
			key = signer
		}
	}
	if keyErr != nil {
		return damaged(p.dir, []string{saKeyFile}, keyErr,
			"Every service-account token of the cluster, those of token AccessRequests among them, was signed with this key",
			"or remove "+saKeyFile+" and "+saPubFile+" to make a new key pair: the cluster keeps its data, tokens issued before stop working")
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	want := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	if got, err := os.ReadFile(p.path(saPubFile)); err == nil && string(got) == string(want) {
		return nil
	}
	return writeFileAtomic(p.path(saPubFile), want, 0o644)
}

// issueServing issues the API server's serving certificate for hosts (IP addresses or DNS
// names) and the in-cluster names of the kubernetes Service.
func (p *pki) issueServing(hosts []string) error {
	var ips []net.IP
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	cert, key, err := p.issue(pkix.Name{CommonName: "kube-apiserver"}, &sans{ips: ips, dns: dns}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	p.ended(servingCertFile, cert.NotAfter)
	return p.write(servingCertFile, servingKeyFile, cert, key)
}

type sans struct {
	ips []net.IP
	dns []string
}

// loadOrIssue returns the PEM certificate and key in certFile and keyFile, issuing new ones with
// issue when they are missing, unreadable, not signed by this CA or close to expiry.
func (p *pki) loadOrIssue(certFile, keyFile string, issue func() (*x509.Certificate, crypto.Signer, error)) (certPEM, keyPEM []byte, err error) {
	if certPEM, keyPEM, ok := p.load(certFile, keyFile, true); ok {
		return certPEM, keyPEM, nil
	}
	cert, key, err := issue()
	if err != nil {
		return nil, nil, err
	}
	if err := p.write(certFile, keyFile, cert, key); err != nil {
		return nil, nil, err
	}
	certPEM, keyPEM, ok := p.load(certFile, keyFile, false)
	if !ok {
		return nil, nil, errors.New("a certificate just written does not read back")
	}
	return certPEM, keyPEM, nil
}

// load reads the pair certFile/keyFile and reports whether it can be used: the key belongs to the
// certificate, this CA signed it and (due) its renewal time has not come. A usable pair's end is
// recorded.
func (p *pki) load(certFile, keyFile string, due bool) (certPEM, keyPEM []byte, ok bool) {
	certPEM, certErr := os.ReadFile(p.path(certFile))
	keyPEM, keyErr := os.ReadFile(p.path(keyFile))
	if certErr != nil || keyErr != nil {
		return nil, nil, false
	}
	_, pairErr := tls.X509KeyPair(certPEM, keyPEM) // the key is readable and belongs to the certificate
	parsed, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || pairErr != nil || parsed[0].CheckSignatureFrom(p.caCert) != nil ||
		(due && !time.Now().Before(p.life.RenewAt(parsed[0].NotAfter))) {
		return nil, nil, false
	}
	p.ended(certFile, parsed[0].NotAfter)
	return certPEM, keyPEM, true
}

// issue signs a new leaf certificate with a fresh ECDSA P-256 key.
func (p *pki) issue(subject pkix.Name, alt *sans, usage x509.ExtKeyUsage) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(p.life.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if alt != nil {
		tmpl.IPAddresses, tmpl.DNSNames = alt.ips, alt.dns
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func (p *pki) write(certFile, keyFile string, cert *x509.Certificate, key crypto.Signer) error {
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return err
	}
	if err := writeKey(p.path(keyFile), key); err != nil {
		return err
	}
	return writeFileAtomic(p.path(certFile), certPEM, 0o644)
}

func writeKey(path string, key crypto.PrivateKey) error {
	data, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return n
}

// writeFileAtomic writes data to path through a temporary file in the same folder and a rename,
// so that a reader (or a crash) never sees a half-written file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return authconfig.WriteFileAtomic(path, data, perm)
}
