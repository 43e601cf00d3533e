package local

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// readCert parses the single certificate in the PEM file name of dir.
func readCert(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	certs, err := certutil.ParseCertsPEM(data)
	require.NoError(t, err)
	require.Len(t, certs, 1, "%s holds one certificate", name)
	return certs[0]
}

// caPool is a pool holding only the CA in dir's ca.crt.
func caPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(mustRead(t, filepath.Join(dir, caCertFile))), "ca.crt holds a PEM certificate")
	return pool
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

func TestLoadOrCreatePKIFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	_, err := loadOrCreatePKI(dir, []string{"127.0.0.1", "localhost"}, certs.Lifetime{})
	require.NoError(t, err)

	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the pki folder")

	for _, tc := range []struct {
		file string
		mode os.FileMode
	}{
		{caKeyFile, 0o600},
		{servingKeyFile, 0o600},
		{adminKeyFile, 0o600},
		{saKeyFile, 0o600},
		{caCertFile, 0o644},
		{caBundleFile, 0o644},
		{servingCertFile, 0o644},
		{adminCertFile, 0o644},
		{saPubFile, 0o644},
		{kcmClientKeyFile, 0o600},
		{kcmServingKeyFile, 0o600},
		{kcmClientCertFile, 0o644},
		{kcmServingCertFile, 0o644},
	} {
		t.Run(tc.file, func(t *testing.T) {
			fi, err := os.Stat(filepath.Join(dir, tc.file))
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular())
			assert.Equal(t, tc.mode, fi.Mode().Perm())
		})
	}

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{caCertFile, caKeyFile, caBundleFile, servingCertFile, servingKeyFile, adminCertFile, adminKeyFile, saKeyFile, saPubFile,
		kcmClientCertFile, kcmClientKeyFile, kcmServingCertFile, kcmServingKeyFile},
		names, "no temporary or extra files")
}

// testServiceIP is the kubernetes Service's address the backend passes as a host.
const testServiceIP = "198.18.0.1"

func TestLoadOrCreatePKIServingCert(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hosts   []string
		wantIPs []string
		wantDNS []string
	}{
		{
			name:    "loopback",
			hosts:   []string{"127.0.0.1", "localhost"},
			wantIPs: []string{"127.0.0.1", testServiceIP},
			wantDNS: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		},
		{
			name:    "advertised IP and name",
			hosts:   []string{"127.0.0.1", "localhost", "10.1.2.3", "cp.example.com"},
			wantIPs: []string{"127.0.0.1", "10.1.2.3", testServiceIP},
			wantDNS: []string{"localhost", "cp.example.com", "kubernetes.default.svc"},
		},
		{
			name:    "IPv6",
			hosts:   []string{"::1", "fd00::5"},
			wantIPs: []string{"::1", "fd00::5", testServiceIP},
			wantDNS: []string{"kubernetes.default.svc"},
		},
		{
			name:    "no hosts",
			hosts:   nil,
			wantIPs: []string{testServiceIP},
			wantDNS: []string{"kubernetes.default.svc"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := loadOrCreatePKI(dir, append(slices.Clone(tc.hosts), testServiceIP), certs.Lifetime{})
			require.NoError(t, err)
			assert.Equal(t, mustRead(t, filepath.Join(dir, caCertFile)), p.CAPEM, "CAPEM is ca.crt")

			cert := readCert(t, dir, servingCertFile)
			ips := ipStrings(cert.IPAddresses)
			for _, ip := range tc.wantIPs {
				assert.Contains(t, ips, ip, "IP SANs")
			}
			for _, name := range tc.wantDNS {
				assert.Contains(t, cert.DNSNames, name, "DNS SANs")
			}
			// IPs are IP SANs only, names DNS SANs only.
			for _, h := range tc.hosts {
				if net.ParseIP(h) != nil {
					assert.NotContains(t, cert.DNSNames, h, "an IP is no DNS SAN")
				} else {
					assert.NotContains(t, ips, h)
				}
			}
			assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, cert.ExtKeyUsage)
			assert.False(t, cert.IsCA)

			roots := caPool(t, dir)
			for _, name := range append(slices.Clone(tc.hosts), testServiceIP, "kubernetes.default.svc") {
				_, err := cert.Verify(x509.VerifyOptions{
					DNSName:   name,
					Roots:     roots,
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				})
				assert.NoError(t, err, "serving certificate verifies for %s", name)
			}
			_, err = cert.Verify(x509.VerifyOptions{
				DNSName:   "not-a-san.example.com",
				Roots:     roots,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			assert.Error(t, err, "a name that is no SAN does not verify")
			_, err = cert.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			assert.Error(t, err, "it does not verify without the CA")

			_, err = tls.LoadX509KeyPair(filepath.Join(dir, servingCertFile), filepath.Join(dir, servingKeyFile))
			assert.NoError(t, err, "apiserver.key belongs to apiserver.crt")
		})
	}
}

func TestLoadOrCreatePKIAdminCert(t *testing.T) {
	dir := t.TempDir()
	p, err := loadOrCreatePKI(dir, []string{"127.0.0.1"}, certs.Lifetime{})
	require.NoError(t, err)

	cert := readCert(t, dir, adminCertFile)
	assert.Equal(t, "openmcp:cluster-provider", cert.Subject.CommonName)
	assert.Equal(t, []string{"system:masters"}, cert.Subject.Organization)
	assert.Empty(t, cert.IPAddresses)
	assert.Empty(t, cert.DNSNames)
	assert.False(t, cert.IsCA)
	assert.WithinDuration(t, time.Now().Add(certs.LeafValidity), cert.NotAfter, time.Hour)

	roots := caPool(t, dir)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "the admin certificate verifies as a client certificate")
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.Error(t, err, "the admin certificate is no serving certificate")

	assert.Equal(t, mustRead(t, filepath.Join(dir, adminCertFile)), p.AdminCertPEM)
	assert.Equal(t, mustRead(t, filepath.Join(dir, adminKeyFile)), p.AdminKeyPEM)
	_, err = tls.X509KeyPair(p.AdminCertPEM, p.AdminKeyPEM)
	assert.NoError(t, err, "AdminKeyPEM belongs to AdminCertPEM")

	ca := readCert(t, dir, caCertFile)
	assert.True(t, ca.IsCA)
	assert.NoError(t, cert.CheckSignatureFrom(ca))
}

func TestLoadOrCreatePKIControllerManagerCerts(t *testing.T) {
	dir := t.TempDir()
	p, err := loadOrCreatePKI(dir, []string{"10.1.2.3"}, certs.Lifetime{})
	require.NoError(t, err)
	roots := caPool(t, dir)

	client := readCert(t, dir, kcmClientCertFile)
	assert.Equal(t, "system:kube-controller-manager", client.Subject.CommonName, "the identity the bootstrap RBAC policy binds")
	assert.Empty(t, client.Subject.Organization, "not in system:masters")
	_, err = client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err)
	_, err = tls.X509KeyPair(p.KCMCertPEM, p.KCMKeyPEM)
	assert.NoError(t, err, "KCMKeyPEM belongs to KCMCertPEM")

	serving := readCert(t, dir, kcmServingCertFile)
	_, err = serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.NoError(t, err, "serves the loopback, whatever the advertise host")
	assert.Equal(t, []string{"127.0.0.1"}, ipStrings(serving.IPAddresses))
}

func TestLoadOrCreatePKISecondCall(t *testing.T) {
	dir := t.TempDir()
	_, err := loadOrCreatePKI(dir, []string{"127.0.0.1", "localhost"}, certs.Lifetime{})
	require.NoError(t, err)
	before := map[string][]byte{}
	for _, f := range []string{caCertFile, caKeyFile, adminCertFile, adminKeyFile, saKeyFile, saPubFile, servingCertFile} {
		before[f] = mustRead(t, filepath.Join(dir, f))
	}

	p, err := loadOrCreatePKI(dir, []string{"127.0.0.1", "localhost", "10.20.30.40", "cp.example.com"}, certs.Lifetime{})
	require.NoError(t, err)

	for _, f := range []string{caCertFile, caKeyFile, adminCertFile, adminKeyFile, saKeyFile, saPubFile} {
		assert.Equal(t, before[f], mustRead(t, filepath.Join(dir, f)), "%s is kept", f)
	}
	assert.Equal(t, before[caCertFile], p.CAPEM)
	assert.Equal(t, before[adminCertFile], p.AdminCertPEM)
	assert.Equal(t, before[adminKeyFile], p.AdminKeyPEM)

	assert.NotEqual(t, before[servingCertFile], mustRead(t, filepath.Join(dir, servingCertFile)), "the serving certificate is re-issued")
	cert := readCert(t, dir, servingCertFile)
	assert.Contains(t, ipStrings(cert.IPAddresses), "10.20.30.40")
	assert.Contains(t, cert.DNSNames, "cp.example.com")
	roots := caPool(t, dir)
	for _, host := range []string{"10.20.30.40", "cp.example.com", "127.0.0.1", "localhost"} {
		_, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		assert.NoError(t, err, "the new serving certificate verifies for %s against the kept CA", host)
	}
	_, err = tls.LoadX509KeyPair(filepath.Join(dir, servingCertFile), filepath.Join(dir, servingKeyFile))
	assert.NoError(t, err)
}

// issueAdmin writes an admin certificate signed by the dir's CA that ends at notAfter.
func issueAdmin(t *testing.T, dir string, notAfter time.Time) {
	t.Helper()
	p, err := loadOrCreatePKI(dir, nil, certs.Lifetime{})
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: adminUser, Organization: []string{adminGroup}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.Cert, key.Public(), p.ca.Key)
	require.NoError(t, err)
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	require.NoError(t, err)
	require.NoError(t, p.write(adminCertFile, adminKeyFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM))
}

func TestLoadOrCreatePKIReissuesAdminCert(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, dir string)
	}{
		{"garbage admin.crt", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, adminCertFile), []byte("\x00\x01garbage, not PEM\n"), 0o644))
		}},
		{"empty admin.crt", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, adminCertFile), nil, 0o644))
		}},
		{"PEM block that is no certificate", func(t *testing.T, dir string) {
			data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
			require.NoError(t, os.WriteFile(filepath.Join(dir, adminCertFile), data, 0o644))
		}},
		{"admin.crt missing", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, adminCertFile)))
		}},
		{"admin.key missing", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, adminKeyFile)))
		}},
		{"garbage admin.key", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, adminKeyFile), []byte("garbage"), 0o600))
		}},
		{"admin.key of another certificate", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, adminKeyFile), mustRead(t, filepath.Join(dir, saKeyFile)), 0o600))
		}},
		{"admin.crt of another CA", func(t *testing.T, dir string) {
			other := t.TempDir()
			_, err := loadOrCreatePKI(other, nil, certs.Lifetime{})
			require.NoError(t, err)
			for _, f := range []string{adminCertFile, adminKeyFile} {
				require.NoError(t, os.WriteFile(filepath.Join(dir, f), mustRead(t, filepath.Join(other, f)), 0o600))
			}
		}},
		{"admin.crt close to expiry", func(t *testing.T, dir string) {
			issueAdmin(t, dir, time.Now().Add(certs.RenewBefore-time.Hour))
		}},
		{"admin.crt expired", func(t *testing.T, dir string) {
			issueAdmin(t, dir, time.Now().Add(-time.Minute))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := loadOrCreatePKI(dir, []string{"127.0.0.1"}, certs.Lifetime{})
			require.NoError(t, err)
			tc.corrupt(t, dir)
			corrupted, _ := os.ReadFile(filepath.Join(dir, adminCertFile))

			p, err := loadOrCreatePKI(dir, []string{"127.0.0.1"}, certs.Lifetime{})
			require.NoError(t, err)

			assert.Equal(t, first.CAPEM, p.CAPEM, "the CA is kept")
			assert.NotEqual(t, first.AdminCertPEM, p.AdminCertPEM, "a new admin certificate")
			assert.NotEqual(t, corrupted, p.AdminCertPEM, "the bad admin certificate is replaced")
			assert.Equal(t, mustRead(t, filepath.Join(dir, adminCertFile)), p.AdminCertPEM, "admin.crt is rewritten")
			assert.Equal(t, mustRead(t, filepath.Join(dir, adminKeyFile)), p.AdminKeyPEM, "admin.key is rewritten")
			_, err = tls.X509KeyPair(p.AdminCertPEM, p.AdminKeyPEM)
			require.NoError(t, err, "the new key belongs to the new certificate")

			cert := readCert(t, dir, adminCertFile)
			assert.Equal(t, adminUser, cert.Subject.CommonName)
			assert.Equal(t, []string{adminGroup}, cert.Subject.Organization)
			assert.Greater(t, time.Until(cert.NotAfter), certs.RenewBefore)
			_, err = cert.Verify(x509.VerifyOptions{Roots: caPool(t, dir), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			assert.NoError(t, err)

			fi, err := os.Stat(filepath.Join(dir, adminKeyFile))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		})
	}
}

func TestLoadOrCreatePKIServiceAccountKeys(t *testing.T) {
	dir := t.TempDir()
	_, err := loadOrCreatePKI(dir, nil, certs.Lifetime{})
	require.NoError(t, err)

	priv, err := keyutil.PrivateKeyFromFile(filepath.Join(dir, saKeyFile))
	require.NoError(t, err)
	signer, ok := priv.(crypto.Signer)
	require.True(t, ok, "sa.key holds a signing key, got %T", priv)
	pubs, err := keyutil.PublicKeysFromFile(filepath.Join(dir, saPubFile))
	require.NoError(t, err)
	require.Len(t, pubs, 1)
	pub, ok := pubs[0].(*ecdsa.PublicKey)
	require.True(t, ok, "sa.pub holds an ECDSA key, got %T", pubs[0])
	assert.True(t, pub.Equal(signer.Public()), "sa.pub is the public half of sa.key")

	digest := sha256.Sum256([]byte("token"))
	sig, err := signer.Sign(rand.Reader, digest[:], crypto.SHA256)
	require.NoError(t, err)
	assert.True(t, ecdsa.VerifyASN1(pub, digest[:], sig), "a signature by sa.key verifies with sa.pub")

	// The service-account keys are no CA keys.
	caPriv, err := keyutil.PrivateKeyFromFile(filepath.Join(dir, caKeyFile))
	require.NoError(t, err)
	assert.False(t, pub.Equal(caPriv.(crypto.Signer).Public()))

	t.Run("sa.pub missing is written anew from sa.key", func(t *testing.T) {
		oldKey := mustRead(t, filepath.Join(dir, saKeyFile))
		require.NoError(t, os.Remove(filepath.Join(dir, saPubFile)))
		_, err := loadOrCreatePKI(dir, nil, certs.Lifetime{})
		require.NoError(t, err)
		assert.Equal(t, oldKey, mustRead(t, filepath.Join(dir, saKeyFile)), "the key that signed every token stays")
		pubs, err := keyutil.PublicKeysFromFile(filepath.Join(dir, saPubFile))
		require.NoError(t, err)
		require.Len(t, pubs, 1)
		assert.True(t, pubs[0].(*ecdsa.PublicKey).Equal(signer.Public()))
	})
}

// TestLoadOrCreatePKIDamaged: a CA or service-account key that exists but does not load is never
// replaced: the error has reason StateDamaged, names the file and says what to do, and no file of
// the folder changes.
func TestLoadOrCreatePKIDamaged(t *testing.T) {
	truncate := func(name string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			data := mustRead(t, filepath.Join(dir, name))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), data[:len(data)/2], 0o600))
		}
	}
	tests := map[string]struct {
		damage func(t *testing.T, dir string)
		want   []string
	}{
		"ca.key truncated": {damage: truncate(caKeyFile), want: []string{caCertFile + " and ", caKeyFile, "do not belong together", "remove both files to make a new CA"}},
		"ca.crt truncated": {damage: truncate(caCertFile), want: []string{caCertFile, "remove both files to make a new CA"}},
		"ca.key missing":   {damage: func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, caKeyFile))) }, want: []string{caKeyFile, "no such file"}},
		"sa.key garbage": {damage: func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, saKeyFile), []byte("garbage"), 0o600))
		}, want: []string{saKeyFile, "service-account token", "tokens issued before stop working"}},
		"sa.key missing, sa.pub kept": {damage: func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, saKeyFile))) }, want: []string{"sa.key is missing but sa.pub exists"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := loadOrCreatePKI(dir, nil, certs.Lifetime{})
			require.NoError(t, err)
			tt.damage(t, dir)
			before := folderFiles(t, dir)
			_, err = loadOrCreatePKI(dir, nil, certs.Lifetime{})
			require.Error(t, err)
			assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "reason StateDamaged: %v", err)
			for _, w := range append(tt.want, dir, "restore it from a backup of --state-dir", "starts by itself") {
				assert.Contains(t, err.Error(), w)
			}
			assert.Equal(t, before, folderFiles(t, dir), "nothing in the folder changed")
		})
	}
}

// folderFiles maps the files of dir to their contents.
func folderFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		out[e.Name()] = string(mustRead(t, filepath.Join(dir, e.Name())))
	}
	return out
}
