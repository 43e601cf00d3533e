// Package certs issues the certificates of a cluster's control plane in memory: a CA, leaf
// certificates signed by it, and the checks that decide whether one already issued can be kept.
// The hosted backend keeps what it issues in Secrets, the local backend in the files of a cluster's
// pki folder; keys are ECDSA P-256.
package certs

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
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Lifetimes: a CA (certutil's default, 10 years) outlives any cluster; a leaf is kept for a year
// and issued anew RenewBefore its end.
const (
	LeafValidity = 365 * 24 * time.Hour
	RenewBefore  = 30 * 24 * time.Hour
)

// Lifetime is how long the leaves a CA issues are valid and how long before their end they are
// issued anew. Zero fields take LeafValidity and RenewBefore; tests make them short to watch a
// renewal happen.
type Lifetime struct {
	Validity, RenewBefore time.Duration
}

// Or returns l with its zero fields set to the defaults.
func (l Lifetime) Or() Lifetime {
	if l.Validity <= 0 {
		l.Validity = LeafValidity
	}
	if l.RenewBefore <= 0 {
		l.RenewBefore = RenewBefore
	}
	return l
}

// RenewAt is when a certificate that ends at notAfter is issued anew.
func (l Lifetime) RenewAt(notAfter time.Time) time.Time { return notAfter.Add(-l.Or().RenewBefore) }

// CA is a certificate authority: its certificate and key, parsed and as PEM.
type CA struct {
	Cert            *x509.Certificate
	Key             crypto.Signer
	CertPEM, KeyPEM []byte
	// Lifetime of the leaves it issues and keeps.
	Lifetime Lifetime
}

// NewCA makes a self-signed CA named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: commonName}, key)
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, err
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// CAError is ParseCA's error: which half of the CA is at fault, so that a caller keeping the two
// halves in files or keys of its own can name the one to look at.
type CAError struct {
	// Key is true when the key is at fault (it does not read, cannot sign or is not the
	// certificate's), false when the certificate is (it does not read or is no CA's).
	Key bool
	Err error
}

func (e *CAError) Error() string { return e.Err.Error() }
func (e *CAError) Unwrap() error { return e.Err }

// ParseCA reads a CA from PEM. The error, a *CAError, says which half does not read or that they
// do not belong together.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, &CAError{Err: fmt.Errorf("the CA certificate does not read: %w", err)}
	}
	signer, err := parseSigner(keyPEM)
	if err != nil {
		return nil, &CAError{Key: true, Err: fmt.Errorf("the CA key %w", err)}
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, &CAError{Key: true, Err: fmt.Errorf("the CA key does not belong to its certificate: %w", err)}
	}
	if !certs[0].IsCA {
		return nil, &CAError{Err: errors.New("the CA certificate is not a CA's")}
	}
	return &CA{Cert: certs[0], Key: signer, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// parseSigner reads a private key that can sign from PEM; its error completes "the key …".
func parseSigner(keyPEM []byte) (crypto.Signer, error) {
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("does not read: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("cannot sign")
	}
	return signer, nil
}

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName   string
	Organization []string
	// Hosts are the IP addresses and DNS names of a serving certificate.
	Hosts []string
	// Usages: client or server authentication, or both.
	Usages []x509.ExtKeyUsage
	// Validity, when set, is how long the certificate is valid instead of the CA's Lifetime: a
	// certificate made for one short task (a Job: its deadline and a margin), issued anew for the
	// next and never kept (Keep keeps none that is within the Lifetime's RenewBefore of its end).
	Validity time.Duration
}

// Issue signs a new certificate for l with a fresh key and a new serial number, valid from an hour
// ago (clocks that differ) for l's Validity, or else the CA's Lifetime.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	validity := ca.Lifetime.Or().Validity
	if l.Validity > 0 {
		validity = l.Validity
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName, Organization: l.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  l.Usages,
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if certPEM, err = certutil.EncodeCertificates(cert); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// Keep reports whether the pair certPEM/keyPEM can stay: it reads, the key belongs to the
// certificate, ca signed it, its renewal time (the Lifetime's RenewBefore its end) has not come,
// and it names l's subject and every one of l's hosts, for l's usages.
func (ca *CA) Keep(certPEM, keyPEM []byte, l Leaf) bool {
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return false
	}
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return false
	}
	c := certs[0]
	if c.CheckSignatureFrom(ca.Cert) != nil || !time.Now().Before(ca.Lifetime.RenewAt(c.NotAfter)) ||
		c.Subject.CommonName != l.CommonName || !slices.Equal(c.Subject.Organization, l.Organization) {
		return false
	}
	for _, h := range l.Hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	want, have := slices.Clone(l.Usages), slices.Clone(c.ExtKeyUsage)
	slices.Sort(want)
	slices.Sort(have)
	return slices.Equal(want, have)
}

// NotAfter is when the first certificate of certPEM ends.
func NotAfter(certPEM []byte) (time.Time, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return time.Time{}, err
	}
	return certs[0].NotAfter, nil
}

// NewServiceAccountKey returns a new key pair for signing service-account tokens, as PEM.
func NewServiceAccountKey() (keyPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, nil, err
	}
	if pubPEM, err = PublicKeyPEM(key); err != nil {
		return nil, nil, err
	}
	return keyPEM, pubPEM, nil
}

// PublicKeyPEM is the PEM public key of key.
func PublicKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ServiceAccountPublicKey is the PEM public key of the service-account signing key keyPEM, to
// write anew a public key that went missing. The error says why keyPEM does not read.
func ServiceAccountPublicKey(keyPEM []byte) ([]byte, error) {
	signer, err := parseSigner(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the service-account key %w", err)
	}
	return PublicKeyPEM(signer)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return n
}
