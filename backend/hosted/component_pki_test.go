package hosted

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

func TestEnsureRefusesADamagedCA(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("damaged")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	ca := get(t, &corev1.Secret{}, ns, SecretCA)
	ca.Data["ca.key"] = []byte("garbage")
	require.NoError(t, env.Client.Update(t.Context(), ca))

	h2 := startBackend(t) // a new backend: nothing remembered
	h2.pc = h.pc
	_, err := h2.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), "Secret "+ns+"/ca")
	assert.Equal(t, []byte("garbage"), get(t, &corev1.Secret{}, ns, SecretCA).Data["ca.key"], "left for a person to restore")
}

// TestCertificatesRenewed: with leaves valid 10 minutes and renewed 2 s after they were issued,
// the backend asks to come back in time, issues the due leaves anew from the same CA at a later
// reconcile (no restart of the operator), rolls the API server's Deployment by the checksum in
// its pod template, keeps the expiry gauge current, and makes a deleted leaf Secret again.
func TestCertificatesRenewed(t *testing.T) {
	h := startBackendLifetime(t, certs.Lifetime{Validity: 10 * time.Minute, RenewBefore: 10*time.Minute - 2*time.Second})
	cl := newCluster("renew")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	ca := get(t, &corev1.Secret{}, ns, SecretCA)
	serving := get(t, &corev1.Secret{}, ns, SecretServing)
	sum := get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates]
	require.NotEmpty(t, sum)
	first, err := certs.NotAfter(serving.Data["tls.crt"])
	require.NoError(t, err)
	assert.InDelta(t, float64(first.Unix()), backend.CertificateExpiry(backend.RefOf(cl), SecretServing), 1)

	s := h.ensure(t, cl)
	assert.Greater(t, s.RetryAfter, time.Duration(0))
	assert.LessOrEqual(t, s.RetryAfter, 3*time.Second, "back when the first certificate is due, not later")

	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return get(t, &corev1.Secret{}, ns, SecretServing).ResourceVersion != serving.ResourceVersion
	}, 30*time.Second, 200*time.Millisecond, "the serving certificate is issued anew")
	renewed := get(t, &corev1.Secret{}, ns, SecretServing)
	later, err := certs.NotAfter(renewed.Data["tls.crt"])
	require.NoError(t, err)
	assert.True(t, later.After(first), "the new certificate ends later")
	caNow := get(t, &corev1.Secret{}, ns, SecretCA)
	assert.Equal(t, ca.ResourceVersion, caNow.ResourceVersion, "the CA is kept: every kubeconfig stays valid")
	parsed, err := certs.ParseCA(caNow.Data["ca.crt"], caNow.Data["ca.key"])
	require.NoError(t, err)
	parsed.Lifetime = certs.Lifetime{Validity: 10 * time.Minute, RenewBefore: time.Second}
	assert.True(t, parsed.Keep(renewed.Data["tls.crt"], renewed.Data["tls.key"], certs.Leaf{CommonName: "kube-apiserver", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}), "signed by the same CA")
	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates] != sum
	}, 10*time.Second, 100*time.Millisecond, "the API server's pods roll with the new certificates")
	assert.Greater(t, backend.CertificateExpiry(backend.RefOf(cl), SecretServing), float64(first.Unix()), "the gauge follows")

	// A deleted leaf Secret is made again at the next reconcile.
	require.NoError(t, env.Client.Delete(t.Context(), get(t, &corev1.Secret{}, ns, SecretEtcdClient)))
	h.ensure(t, cl)
	got := get(t, &corev1.Secret{}, ns, SecretEtcdClient)
	assert.NotEmpty(t, got.Data["tls.crt"])
}
