package local

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// TestLoadOrCreatePKIKeepsEarlierFolders: a pki folder written by the backend before it issued
// through backend/certs (its own CA, leaf and key code, reproduced here as it wrote them) loads
// unchanged: the CA, the client certificates and the service-account keys are kept byte for byte,
// only the serving certificates are issued anew, as at every start, and the trust bundle is
// written: the CA alone.
func TestLoadOrCreatePKIKeepsEarlierFolders(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, mode))
	}
	newKey := func() *ecdsa.PrivateKey {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return key
	}
	keyPEM := func(key *ecdsa.PrivateKey) []byte {
		data, err := keyutil.MarshalPrivateKeyToPEM(key)
		require.NoError(t, err)
		return data
	}

	caKey := newKey()
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "local-cluster-ca"}, caKey)
	require.NoError(t, err)
	caPEM, err := certutil.EncodeCertificates(ca)
	require.NoError(t, err)
	write(caKeyFile, keyPEM(caKey), 0o600)
	write(caCertFile, caPEM, 0o644)

	leaf := func(certFile, keyFile string, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) {
		key := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      subject,
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(certs.LeafValidity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		require.NoError(t, err)
		write(keyFile, keyPEM(key), 0o600)
		write(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	}
	leaf(adminCertFile, adminKeyFile, pkix.Name{CommonName: adminUser, Organization: []string{adminGroup}}, x509.ExtKeyUsageClientAuth, nil, nil)
	leaf(kcmClientCertFile, kcmClientKeyFile, pkix.Name{CommonName: kcmUser}, x509.ExtKeyUsageClientAuth, nil, nil)
	leaf(servingCertFile, servingKeyFile, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1")}, []string{"kubernetes.default.svc"})
	leaf(kcmServingCertFile, kcmServingKeyFile, pkix.Name{CommonName: "kube-controller-manager"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})

	saKey := newKey()
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	require.NoError(t, err)
	write(saKeyFile, keyPEM(saKey), 0o600)
	write(saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}), 0o644)

	before := folderFiles(t, dir)
	p, err := loadOrCreatePKI(dir, []string{"127.0.0.1", "localhost"}, certs.Lifetime{})
	require.NoError(t, err)

	after := folderFiles(t, dir)
	for _, f := range []string{caCertFile, caKeyFile, adminCertFile, adminKeyFile, kcmClientCertFile, kcmClientKeyFile, saKeyFile, saPubFile} {
		assert.Equal(t, before[f], after[f], "%s is kept", f)
	}
	for _, f := range []string{servingCertFile, kcmServingCertFile} {
		assert.NotEqual(t, before[f], after[f], "%s is issued anew, as at every start", f)
	}
	assert.Len(t, after, len(before)+1, "no file added or removed but the trust bundle")
	assert.Equal(t, string(caPEM), after[caBundleFile], "the trust bundle is the CA alone")
	assert.Equal(t, caPEM, p.CAPEM)
	assert.Equal(t, before[adminCertFile], string(p.AdminCertPEM))
	assert.Equal(t, before[kcmClientCertFile], string(p.KCMCertPEM))
	assert.NoError(t, readCert(t, dir, servingCertFile).CheckSignatureFrom(ca), "the new serving certificate is signed by the kept CA")
}
