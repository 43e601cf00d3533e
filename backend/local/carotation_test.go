package local

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// certsOf reads every certificate of a PEM file of dir.
func certsOf(t *testing.T, dir, name string) []*x509.Certificate {
	t.Helper()
	c, err := certutil.ParseCertsPEM(mustRead(t, filepath.Join(dir, name)))
	require.NoError(t, err)
	return c
}

// verifies reports whether the leaf certFile of dir verifies against the CAs of pemCAs.
func verifies(t *testing.T, dir, certFile string, pemCAs []byte, usage x509.ExtKeyUsage) bool {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pemCAs))
	_, err := readCert(t, dir, certFile).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err == nil
}

// backdate moves the rotation record of dir's phase start back by d: the time of a phase passed.
func backdate(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	p := &pki{dir: dir}
	r, err := p.readRotation()
	require.NoError(t, err)
	r.Since = r.Since.Add(-d)
	require.NoError(t, p.writeRotation(r))
}

// TestCARotationFiles walks a pki folder through a CA rotation by its files: the new CA is
// trusted (the bundle holds old and new) while the old one still signs; then the new one signs
// every leaf while the old one is still trusted, the bundle the same bytes; then the old one is
// dropped. Every leaf verifies against the bundle of each phase; one signed by the new CA does not
// verify against the old CA alone (what a client that kept an old kubeconfig sees).
func TestCARotationFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	hosts := []string{"127.0.0.1"}
	// A CA valid an hour, not due yet; then the same folder with a lifetime that makes it due.
	p, err := loadOrCreatePKI(dir, hosts, certs.Lifetime{CAValidity: time.Hour, CARenewBefore: 10 * time.Minute})
	require.NoError(t, err)
	oldCA := mustRead(t, filepath.Join(dir, caCertFile))
	assert.Equal(t, oldCA, p.CAPEM, "one CA: the bundle is the CA")
	assert.Equal(t, oldCA, mustRead(t, filepath.Join(dir, caBundleFile)))
	assert.Equal(t, certs.PhaseNone, p.rotation.Phase)
	caEnd := readCert(t, dir, caCertFile).NotAfter
	assert.WithinDuration(t, time.Now().Add(time.Hour), caEnd, 5*time.Second, "valid for CAValidity")
	assert.Equal(t, caEnd, readCert(t, dir, adminCertFile).NotAfter, "a year's leaf ends with its CA")
	assert.Equal(t, caEnd.Add(-10*time.Minute), p.RenewAt, "due when the rotation starts")
	assert.Equal(t, map[string]time.Time{backend.CACurrent: caEnd}, p.CANotAfter)
	adminBefore := mustRead(t, filepath.Join(dir, adminCertFile))

	due := certs.Lifetime{CAValidity: time.Hour, CARenewBefore: 2 * time.Hour} // step 30m
	p, err = loadOrCreatePKI(dir, hosts, due)
	require.NoError(t, err)
	require.Equal(t, certs.PhaseTrusting, p.rotation.Phase)
	newCA := mustRead(t, filepath.Join(dir, caNextCertFile))
	bundle := append(append([]byte{}, oldCA...), newCA...)
	assert.Equal(t, bundle, p.CAPEM, "Trusting: the old CA and the new one")
	assert.Equal(t, bundle, mustRead(t, filepath.Join(dir, caBundleFile)))
	assert.Equal(t, oldCA, mustRead(t, filepath.Join(dir, caCertFile)), "the old CA still signs")
	assert.Equal(t, adminBefore, mustRead(t, filepath.Join(dir, adminCertFile)), "the leaves stay")
	assert.True(t, verifies(t, dir, servingCertFile, oldCA, x509.ExtKeyUsageServerAuth), "a client holding the old CA alone still verifies the API server")
	assert.Contains(t, p.CANotAfter, backend.CANext)
	assert.WithinDuration(t, p.rotation.Since.Add(30*time.Minute), p.RenewAt, time.Second, "due when the new CA signs")

	p, err = loadOrCreatePKI(dir, hosts, due)
	require.NoError(t, err)
	assert.Equal(t, certs.PhaseTrusting, p.rotation.Phase, "within the step: still Trusting")
	assert.Equal(t, newCA, mustRead(t, filepath.Join(dir, caNextCertFile)), "the same new CA")

	backdate(t, dir, 31*time.Minute)
	p, err = loadOrCreatePKI(dir, hosts, due)
	require.NoError(t, err)
	require.Equal(t, certs.PhaseSigning, p.rotation.Phase)
	assert.Equal(t, newCA, mustRead(t, filepath.Join(dir, caCertFile)), "Signing: the new CA signs")
	assert.Equal(t, oldCA, mustRead(t, filepath.Join(dir, caOldCertFile)))
	assert.NoFileExists(t, filepath.Join(dir, caNextCertFile))
	assert.NoFileExists(t, filepath.Join(dir, caNextKeyFile))
	assert.Equal(t, bundle, p.CAPEM, "the bundle is the same bytes: kubeconfigs that have it stay")
	for _, f := range []struct {
		file  string
		usage x509.ExtKeyUsage
	}{{servingCertFile, x509.ExtKeyUsageServerAuth}, {adminCertFile, x509.ExtKeyUsageClientAuth},
		{kcmClientCertFile, x509.ExtKeyUsageClientAuth}, {kcmServingCertFile, x509.ExtKeyUsageServerAuth}} {
		assert.True(t, verifies(t, dir, f.file, newCA, f.usage), "%s is signed by the new CA", f.file)
		assert.True(t, verifies(t, dir, f.file, bundle, f.usage), "%s verifies against the bundle", f.file)
		assert.False(t, verifies(t, dir, f.file, oldCA, f.usage), "%s does not verify against the old CA alone", f.file)
	}
	assert.Contains(t, p.CANotAfter, backend.CAPrevious)

	backdate(t, dir, 31*time.Minute)
	p, err = loadOrCreatePKI(dir, hosts, due)
	require.NoError(t, err)
	assert.Equal(t, certs.PhaseNone, p.rotation.Phase)
	assert.Equal(t, 1, p.rotation.Rotations)
	assert.False(t, p.rotation.RotatedAt.IsZero())
	assert.Equal(t, newCA, p.CAPEM, "done: the new CA alone")
	assert.Equal(t, newCA, mustRead(t, filepath.Join(dir, caBundleFile)))
	assert.NoFileExists(t, filepath.Join(dir, caOldCertFile))
	assert.Len(t, certsOf(t, dir, caBundleFile), 1)
	assert.Equal(t, map[string]time.Time{backend.CACurrent: readCert(t, dir, caCertFile).NotAfter}, p.CANotAfter)

	part := backend.CertificatesPart(time.Now(), p.rotation, p.CANotAfter, due, "")
	assert.Equal(t, backend.Part{Type: backend.PartCertificates, Ready: true, Reason: backend.ReasonCARotated, Message: part.Message}, part)
}

// TestCARotationInterrupted: an operator stopped after the record said Signing but before the
// new CA's files were moved over the signing CA's finishes the move at its next load.
func TestCARotationInterrupted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	due := certs.Lifetime{CAValidity: time.Hour, CARenewBefore: 2 * time.Hour}
	p, err := loadOrCreatePKI(dir, nil, due)
	require.NoError(t, err)
	require.Equal(t, certs.PhaseTrusting, p.rotation.Phase)
	oldCA, newCA := mustRead(t, filepath.Join(dir, caCertFile)), mustRead(t, filepath.Join(dir, caNextCertFile))
	newKey := mustRead(t, filepath.Join(dir, caNextKeyFile))
	// What step wrote before it stopped: ca-old.crt, the record, and the new key over the old.
	require.NoError(t, os.WriteFile(filepath.Join(dir, caOldCertFile), oldCA, 0o644))
	r := p.rotation
	r.Phase, r.Since = certs.PhaseSigning, time.Now()
	require.NoError(t, p.writeRotation(r))
	require.NoError(t, os.WriteFile(filepath.Join(dir, caKeyFile), newKey, 0o600))

	p, err = loadOrCreatePKI(dir, nil, due)
	require.NoError(t, err, "a key and certificate that do not belong together are mended from the next CA's files")
	assert.Equal(t, certs.PhaseSigning, p.rotation.Phase)
	assert.Equal(t, newCA, mustRead(t, filepath.Join(dir, caCertFile)))
	assert.Equal(t, newKey, mustRead(t, filepath.Join(dir, caKeyFile)))
	assert.NoFileExists(t, filepath.Join(dir, caNextCertFile))
	assert.Equal(t, append(append([]byte{}, oldCA...), newCA...), p.CAPEM)
	assert.True(t, verifies(t, dir, adminCertFile, newCA, x509.ExtKeyUsageClientAuth))
}

// TestCARotationDamagedRecord: a record that does not read stops the load with StateDamaged and
// says what to do; the CA files are not touched.
func TestCARotationDamagedRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	_, err := loadOrCreatePKI(dir, nil, certs.Lifetime{})
	require.NoError(t, err)
	ca := mustRead(t, filepath.Join(dir, caCertFile))
	for name, data := range map[string]string{"not JSON": "{", "an unknown phase": `{"phase":"Dropping"}`} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, caRotationFile), []byte(data), 0o600))
			_, err := loadOrCreatePKI(dir, nil, certs.Lifetime{})
			require.Error(t, err)
			assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "reason StateDamaged: %v", err)
			assert.Contains(t, err.Error(), caRotationFile)
			assert.Contains(t, err.Error(), "or remove it")
			assert.Equal(t, ca, mustRead(t, filepath.Join(dir, caCertFile)))
		})
	}
}
