package hosted

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// TestReadCA: a CA Secret as each version and each mishap leaves it.
func TestReadCA(t *testing.T) {
	s, err := certs.NewCA("kubernetes")
	require.NoError(t, err)
	n, err := certs.NewCA("kubernetes")
	require.NoError(t, err)
	rec := func(r certs.Rotation) []byte {
		data, err := json.Marshal(r)
		require.NoError(t, err)
		return data
	}
	since := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		data      map[string][]byte
		err       string
		phase     certs.RotationPhase
		signing   *certs.CA
		bundleOf  []*certs.CA
		rotations int
		restarted bool
	}{
		{name: "made before rotations: ca.crt is the signing CA", data: map[string][]byte{"ca.crt": s.CertPEM, "ca.key": s.KeyPEM},
			signing: s, bundleOf: []*certs.CA{s}},
		{name: "Trusting", data: map[string][]byte{caKeySigning: s.CertPEM, caKeyKey: s.KeyPEM, caKeyNextCert: n.CertPEM, caKeyNextKey: n.KeyPEM,
			caKeyRotation: rec(certs.Rotation{Phase: certs.PhaseTrusting, Since: since})},
			phase: certs.PhaseTrusting, signing: s, bundleOf: []*certs.CA{s, n}},
		{name: "Trusting, the next CA lost: the rotation starts again", data: map[string][]byte{caKeySigning: s.CertPEM, caKeyKey: s.KeyPEM, caKeyNextCert: n.CertPEM,
			caKeyRotation: rec(certs.Rotation{Phase: certs.PhaseTrusting, Since: since, Rotations: 2})},
			signing: s, bundleOf: []*certs.CA{s}, rotations: 2},
		{name: "Signing: the old CA first in the bundle", data: map[string][]byte{caKeySigning: n.CertPEM, caKeyKey: n.KeyPEM, caKeyOldCert: s.CertPEM,
			caKeyRotation: rec(certs.Rotation{Phase: certs.PhaseSigning, Since: since})},
			phase: certs.PhaseSigning, signing: n, bundleOf: []*certs.CA{s, n}},
		{name: "Signing, the old CA lost: no longer trusted", data: map[string][]byte{caKeySigning: n.CertPEM, caKeyKey: n.KeyPEM,
			caKeyRotation: rec(certs.Rotation{Phase: certs.PhaseSigning, Since: since})},
			phase: certs.PhaseSigning, signing: n, bundleOf: []*certs.CA{n}},
		{name: "the key of another CA", data: map[string][]byte{caKeySigning: s.CertPEM, caKeyKey: n.KeyPEM}, err: "does not belong"},
		{name: "a record that does not read", data: map[string][]byte{caKeySigning: s.CertPEM, caKeyKey: s.KeyPEM, caKeyRotation: []byte("{")},
			err: "rotation.json does not read"},
		{name: "an unknown phase", data: map[string][]byte{caKeySigning: s.CertPEM, caKeyKey: s.KeyPEM, caKeyRotation: []byte(`{"phase":"Dropping"}`)},
			err: `unknown phase "Dropping"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := readCA(tc.data)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.phase, r.rotation.Phase)
			assert.Equal(t, tc.rotations, r.rotation.Rotations)
			assert.Equal(t, tc.signing.CertPEM, r.ca.CertPEM)
			var want []byte
			for _, ca := range tc.bundleOf {
				want = append(want, ca.CertPEM...)
			}
			assert.Equal(t, string(want), string(r.bundle()))
		})
	}
}

// TestCARotation: a control plane whose CAs end within a minute has them rotated with an
// overlapping trust bundle. Trusting: a new CA in the bundle of every verifier (the API server's
// and etcd's pod templates roll with it, the kubeconfigs carry it), the old one still signing; the
// rotation waits there, past its step, while the workloads have not rolled. Signing, once they
// have: the new CA signs every leaf, the bundle keeps the same bytes (kubeconfigs are not issued
// again). Then the old CA is dropped. The CertificatesValid part and the CA expiry gauge follow.
func TestCARotation(t *testing.T) {
	life := certs.Lifetime{CAValidity: time.Minute, CARenewBefore: 40 * time.Second} // Trusting at 20 s, a step of 10 s
	h := startBackendLifetime(t, life)
	cl := newCluster("rotate")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	rolledOutNow(t, cl)
	ns := NamespaceFor(cl.UID)
	ref := backend.RefOf(cl)
	first := readCASecret(t, ns, SecretCA)
	oldCA := first.ca
	require.Equal(t, certs.PhaseNone, first.rotation.Phase)
	st := h.ensure(t, cl)
	assert.Equal(t, backend.ReasonCAValid, st.Part(backend.PartCertificates).Reason)
	assert.Empty(t, get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationTrust], "never rotated: the templates do not change")

	// Trusting.
	trusting, st := h.awaitCAPhase(t, cl, certs.PhaseTrusting, 40*time.Second)
	bundle := trusting.bundle()
	assert.Len(t, pemCerts(t, bundle), 2, "the old and the new CA are trusted")
	assert.Equal(t, oldCA.CertPEM, trusting.ca.CertPEM, "the old CA still signs")
	assert.Equal(t, bundle, st.CABundle, "clients get the bundle")
	assert.Equal(t, bundle, kubeconfigCA(t, ns), "the controller manager's kubeconfig trusts the bundle")
	assert.True(t, signedBy(t, leafCert(t, ns, SecretServing), oldCA), "the serving certificate is the old CA's yet")
	etcdBundle := readCASecret(t, ns, SecretEtcdCA).bundle()
	assert.Len(t, pemCerts(t, etcdBundle), 2, "etcd's CA rotates too")
	assert.Equal(t, etcdBundle, get(t, &corev1.Secret{}, ns, SecretEtcdClient).Data["ca.crt"], "the API server's etcd CA file follows the bundle")
	trust := get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationTrust]
	require.NotEmpty(t, trust, "the API servers roll onto the bundle")
	assert.Equal(t, trust, get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Template.Annotations[AnnotationTrust], "etcd rolls onto the bundle")
	part := st.Part(backend.PartCertificates)
	assert.Equal(t, backend.ReasonCARotating, part.Reason)
	assert.Contains(t, part.Message, "phase 1 of 3 (Trusting)")
	assert.Positive(t, backend.CAExpiry(ref, backend.CANext), "the gauge has the next CA")

	// Not rolled: held past the step, and said.
	held := get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates]
	stepEnd := trusting.rotation.Since.Add(life.CAStep() + time.Second)
	for time.Now().Before(stepEnd) {
		st = h.ensure(t, cl)
		require.Equal(t, certs.PhaseTrusting, readCASecret(t, ns, SecretCA).rotation.Phase, "no new CA signs before every workload trusts it")
	}
	st = h.ensure(t, cl)
	assert.Contains(t, st.Part(backend.PartCertificates).Message, "waits for the API servers")
	assert.Equal(t, held, get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates],
		"while held, no leaf is issued again (the old CA would give it the same end) and nothing rolls")

	// Rolled: Signing.
	rolledOutNow(t, cl)
	sum := get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates]
	signing, st := h.awaitCAPhase(t, cl, certs.PhaseSigning, 20*time.Second)
	newCA := signing.ca
	assert.Equal(t, trusting.next.CertPEM, newCA.CertPEM, "the CA trusted in phase Trusting signs")
	assert.Equal(t, bundle, signing.bundle(), "the same bundle: kubeconfigs that have it are kept")
	assert.Equal(t, bundle, st.CABundle)
	assert.True(t, signedBy(t, leafCert(t, ns, SecretServing), newCA), "the serving certificate is issued anew by the new CA")
	assert.True(t, signedBy(t, leafCert(t, ns, SecretAdmin), newCA), "and the operator's")
	assert.NotEqual(t, sum, get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates], "the API servers roll onto them")
	assert.Contains(t, st.Part(backend.PartCertificates).Message, "phase 2 of 3 (Signing)")
	assert.Positive(t, backend.CAExpiry(ref, backend.CAPrevious), "the gauge has the previous CA")

	// Rolled again: the old CA dropped.
	rolledOutNow(t, cl)
	done, st := h.awaitCAPhase(t, cl, certs.PhaseNone, 20*time.Second)
	assert.Equal(t, newCA.CertPEM, done.bundle(), "the new CA alone is trusted")
	assert.Equal(t, 1, done.rotation.Rotations)
	assert.Equal(t, newCA.CertPEM, st.CABundle)
	assert.Equal(t, newCA.CertPEM, kubeconfigCA(t, ns))
	assert.Equal(t, backend.ReasonCARotated, st.Part(backend.PartCertificates).Reason)
	assert.Zero(t, backend.CAExpiry(ref, backend.CAPrevious), "no previous CA any more")
	assert.NotEqual(t, trust, get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Template.Annotations[AnnotationTrust], "etcd rolls to drop the old CA")
}

// awaitCAPhase ensures cl until its cluster CA is in phase, and returns the CA and the last State.
func (h *harness) awaitCAPhase(t *testing.T, cl *clustersv1alpha1.Cluster, phase certs.RotationPhase, within time.Duration) (*rotatingCA, backend.State) {
	t.Helper()
	var ca *rotatingCA
	var st backend.State
	require.Eventually(t, func() bool {
		st = h.ensure(t, cl)
		ca = readCASecret(t, NamespaceFor(cl.UID), SecretCA)
		return ca.rotation.Phase == phase
	}, within, 200*time.Millisecond, "the cluster CA in phase %q", phase)
	return ca, st
}

// readCASecret reads the CA of Secret name of namespace ns.
func readCASecret(t *testing.T, ns, name string) *rotatingCA {
	t.Helper()
	r, err := readCA(get(t, &corev1.Secret{}, ns, name).Data)
	require.NoError(t, err)
	return r
}

func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	c, err := certutil.ParseCertsPEM(data)
	require.NoError(t, err)
	return c
}

// leafCert is the certificate of leaf Secret name.
func leafCert(t *testing.T, ns, name string) *x509.Certificate {
	t.Helper()
	return pemCerts(t, get(t, &corev1.Secret{}, ns, name).Data["tls.crt"])[0]
}

func signedBy(t *testing.T, c *x509.Certificate, ca *certs.CA) bool {
	t.Helper()
	return c.CheckSignatureFrom(ca.Cert) == nil && bytes.Equal(c.AuthorityKeyId, ca.Cert.SubjectKeyId)
}

// kubeconfigCA is the CA data of the controller manager's kubeconfig.
func kubeconfigCA(t *testing.T, ns string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(get(t, &corev1.Secret{}, ns, SecretKCMKubeconf).Data["kubeconfig"])
	require.NoError(t, err)
	return cfg.Clusters["cluster"].CertificateAuthorityData
}

// TestPairPlan: the cluster CA and etcd's move together, each phase past Trusting only once the
// workloads have settled.
func TestPairPlan(t *testing.T) {
	life := certs.Lifetime{CAValidity: 8 * time.Hour, CARenewBefore: 4 * time.Hour} // step 1h
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	ca := func(end time.Time, r certs.Rotation) *rotatingCA {
		return &rotatingCA{ca: &certs.CA{Cert: &x509.Certificate{NotAfter: end}}, rotation: r}
	}
	trusting := func(since time.Time) certs.Rotation { return certs.Rotation{Phase: certs.PhaseTrusting, Since: since} }
	for _, tc := range []struct {
		name                  string
		cluster, etcd         *rotatingCA
		settled               string
		wantCluster, wantEtcd certs.RotationPhase
		held                  string
	}{
		{"neither due", ca(now.Add(5*time.Hour), certs.Rotation{}), ca(now.Add(5*time.Hour), certs.Rotation{}), "", "", "", ""},
		{"the cluster CA due, etcd's a moment later: both start", ca(now.Add(4*time.Hour), certs.Rotation{}), ca(now.Add(4*time.Hour+time.Millisecond), certs.Rotation{}), "rolling",
			certs.PhaseTrusting, certs.PhaseTrusting, ""},
		{"Trusting, due, settled: both sign", ca(now.Add(3*time.Hour), trusting(now.Add(-time.Hour))), ca(now.Add(3*time.Hour), trusting(now.Add(-time.Hour+time.Millisecond))), "",
			certs.PhaseSigning, certs.PhaseSigning, ""},
		{"Trusting, due, not settled: held", ca(now.Add(3*time.Hour), trusting(now.Add(-time.Hour))), ca(now.Add(3*time.Hour), trusting(now.Add(-time.Hour))), "the API servers",
			certs.PhaseTrusting, certs.PhaseTrusting, "the API servers"},
		{"other phases: each on its own", ca(now.Add(3*time.Hour), trusting(now.Add(-time.Hour))), ca(now.Add(5*time.Hour), certs.Rotation{}), "",
			certs.PhaseSigning, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, held := pairPlan(now, life, tc.cluster, tc.etcd, func() string { return tc.settled })
			assert.Equal(t, tc.wantCluster, next(tc.cluster.rotation, tc.cluster.ca.Cert.NotAfter).Phase, "the cluster CA")
			assert.Equal(t, tc.wantEtcd, next(tc.etcd.rotation, tc.etcd.ca.Cert.NotAfter).Phase, "etcd's CA")
			assert.Equal(t, tc.held, *held)
		})
	}
}
