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

// Lifetimes: a CA is valid 10 years (certutil's default) and, where a backend rotates it, replaced
// from CARenewBefore its end on; a leaf is kept for a year and issued anew RenewBefore its end.
const (
	LeafValidity  = 365 * 24 * time.Hour
	RenewBefore   = 30 * 24 * time.Hour
	CAValidity    = 10 * 365 * 24 * time.Hour
	CARenewBefore = 365 * 24 * time.Hour
)

// Lifetime is how long the leaves a CA issues are valid and how long before their end they are
// issued anew, and the same for a CA a backend rotates. Zero fields take LeafValidity,
// RenewBefore, CAValidity and CARenewBefore; tests make them short to watch a renewal or a
// rotation happen.
type Lifetime struct {
	Validity, RenewBefore     time.Duration
	CAValidity, CARenewBefore time.Duration
}

// Or returns l with its zero fields set to the defaults.
func (l Lifetime) Or() Lifetime {
	if l.Validity <= 0 {
		l.Validity = LeafValidity
	}
	if l.RenewBefore <= 0 {
		l.RenewBefore = RenewBefore
	}
	if l.CAValidity <= 0 {
		l.CAValidity = CAValidity
	}
	if l.CARenewBefore <= 0 {
		l.CARenewBefore = CARenewBefore
	}
	return l
}

// RenewAt is when a certificate that ends at notAfter is issued anew.
func (l Lifetime) RenewAt(notAfter time.Time) time.Time { return notAfter.Add(-l.Or().RenewBefore) }

// CARenewAt is when the rotation of a CA that ends at notAfter starts.
func (l Lifetime) CARenewAt(notAfter time.Time) time.Time {
	return notAfter.Add(-l.Or().CARenewBefore)
}

// CAStep is how long each phase of a CA rotation lasts at least: a quarter of CARenewBefore, so
// that the old CA is trusted for a step before the new one signs, for a step after, and is still
// valid for two more steps when it is dropped.
func (l Lifetime) CAStep() time.Duration { return l.Or().CARenewBefore / 4 }

// CA is a certificate authority: its certificate and key, parsed and as PEM.
type CA struct {
	Cert            *x509.Certificate
	Key             crypto.Signer
	CertPEM, KeyPEM []byte
	// Lifetime of the leaves it issues and keeps.
	Lifetime Lifetime
	// ReplacedAt, when set, is when a backend's rotation makes another CA sign in its place: a
	// leaf that ends with the CA (Issue clamped it) is due then (LeafRenewAt).
	ReplacedAt time.Time
}

// NewCA makes a self-signed CA named commonName, valid CAValidity (10 years).
func NewCA(commonName string) (*CA, error) { return NewCAValid(commonName, CAValidity) }

// NewCAValid makes a self-signed CA named commonName, valid from an hour ago (clocks that differ)
// for validity from now.
func NewCAValid(commonName string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		DNSNames:              []string{commonName},
		NotBefore:             now.Add(-time.Hour).UTC(),
		NotAfter:              now.Add(validity).UTC(),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	// A CA's SubjectKeyId is made from its public key, and its leaves name it: two CAs of the
	// same name in one trust bundle are told apart.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
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
// ago (clocks that differ) for l's Validity, or else the CA's Lifetime, and never past the CA's
// own end: a leaf does not outlive its CA (its renewal is then the CA's, LeafRenewAt).
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
		NotAfter:     ClampNotAfter(now.Add(validity), ca.Cert.NotAfter),
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
	if c.CheckSignatureFrom(ca.Cert) != nil || !time.Now().Before(ca.LeafRenewAt(c.NotAfter)) ||
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

// ClampNotAfter is the end of a leaf that would end at want, issued by a CA that ends at caEnd:
// the earlier of the two.
func ClampNotAfter(want, caEnd time.Time) time.Time {
	if want.After(caEnd) {
		return caEnd
	}
	return want
}

// LeafRenewAt is when a leaf of ca that ends at notAfter is due to be issued anew: the Lifetime's
// RenewBefore its end, but a leaf that ends with the CA (clamped) is due when the CA is replaced
// (ReplacedAt); issued anew by the same CA it would end no later. A CA never replaced keeps such a
// leaf to its end (issuing it anew would not make it last longer).
func (ca *CA) LeafRenewAt(notAfter time.Time) time.Time {
	if notAfter.Before(ca.Cert.NotAfter) {
		return ca.Lifetime.RenewAt(notAfter)
	}
	if ca.ReplacedAt.IsZero() {
		return notAfter
	}
	return ca.ReplacedAt
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
