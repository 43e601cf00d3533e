package hosted

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// jobCert checks the Secret that job mounts as volume and returns its certificate: the Secret is
// named after the Job and owned by it (the garbage collector deletes it with the Job), and holds
// a certificate with its own key, of the etcd CA of the control plane in namespace ns, for usage,
// made for this Job: it ends after the Job's deadline, and at most jobCertMargin after it.
func jobCert(t *testing.T, job *batchv1.Job, volume, ns string, usage x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	var name string
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			name = v.Secret.SecretName
		}
	}
	require.Equal(t, job.Name, name, "Job %s mounts the Secret of its own name", job.Name)
	sec := get(t, &corev1.Secret{}, BackupNamespace, name)
	assert.Equal(t, []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}},
		sec.OwnerReferences, "the Secret is its Job's")
	_, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	require.NoError(t, err, "the key is the certificate's")
	parsed, err := certutil.ParseCertsPEM(sec.Data["tls.crt"])
	require.NoError(t, err)
	leaf := parsed[0]
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(get(t, &corev1.Secret{}, ns, SecretEtcdCA).Data["ca.crt"]))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
	require.NoError(t, err, "a certificate of the control plane's etcd CA, for %v", usage)
	require.NotNil(t, job.Spec.ActiveDeadlineSeconds)
	deadline := time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second
	left := time.Until(leaf.NotAfter)
	assert.Greater(t, left, deadline, "it outlives the Job's deadline (%s): ends %s", deadline, leaf.NotAfter)
	assert.LessOrEqual(t, left, deadline+jobCertMargin, "by the margin at most (%s): ends %s", jobCertMargin, leaf.NotAfter)
	assert.Less(t, left, 2*time.Hour, "hours, not the leaves' year")
	return leaf
}

// assertNoSecret asserts that Secret name of BackupNamespace is gone.
func assertNoSecret(t *testing.T, name, why string) {
	t.Helper()
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: name}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "Secret %s/%s: %s (%v)", BackupNamespace, name, why, err)
}

// sharedCredential makes the Secret an earlier version kept for all the snapshot and maintenance
// Jobs of the control plane in namespace ns: an etcd client certificate of its CA, valid a year.
func sharedCredential(t *testing.T, h *harness, ns string) {
	t.Helper()
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.NoError(t, hst.apply(t.Context(), (&Spec{}).BackupNamespaceObject()), "the namespace as the backend makes it")
	caSecret := get(t, &corev1.Secret{}, ns, SecretEtcdCA)
	ca, err := certs.ParseCA(caSecret.Data["ca.crt"], caSecret.Data["ca.key"])
	require.NoError(t, err)
	cert, key, err := ca.Issue(certs.Leaf{CommonName: snapshotUser, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: namesFor(ns).shared},
		Data:       map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.CertPEM},
	}))
}
