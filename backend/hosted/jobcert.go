package hosted

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// The credentials of the Jobs in BackupNamespace. etcd has no RBAC: a client certificate of a
// control plane's etcd CA is full access to that etcd, and BackupNamespace is shared by every
// Cluster of the host. So no Job's certificate is kept for the next: each snapshot, maintenance
// and serve Job gets one made for it when it is started, valid for the Job's own deadline
// (activeDeadlineSeconds) and jobCertMargin, in a Secret named after the Job, written right before
// the Job is created and then owned by it. The backend deletes the Secret with the Job once it has
// read the Job's result (task.drop, endServe, gone); if it never does, the garbage collector deletes
// it with the Job; either way the certificate ends within hours of its Job's start.

// jobCertMargin is how long a Job's certificate outlives the Job's deadline: its pod's scheduling
// and start, and clocks that differ (certs.Issue also dates it from an hour back).
const jobCertMargin = 15 * time.Minute

// jobCertValidity is how long the certificate made for job is valid: its deadline and
// jobCertMargin.
func jobCertValidity(job *batchv1.Job) time.Duration {
	return time.Duration(ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0))*time.Second + jobCertMargin
}

// clientLeaf is the etcd client certificate of the snapshot and maintenance Jobs: snapshotUser,
// client authentication (etcd has no RBAC: full access to that etcd).
func clientLeaf(string) certs.Leaf {
	return certs.Leaf{CommonName: snapshotUser, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

// dropSharedCredential removes the etcd client certificate earlier versions kept in
// BackupNamespace for all of s's Jobs (valid for the backend's leaf lifetime, a year by default).
func (b *Backend) dropSharedCredential(ctx context.Context, h *host, s *Spec) error {
	shared := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: namesFor(s.Namespace).shared}}
	if err := h.client.Delete(ctx, shared); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Secret %s/%s, the long-lived etcd client certificate of an earlier version: %w", shared.Namespace, shared.Name, err)
	}
	return nil
}

// jobSecret is the Secret job mounts: leaf, a certificate of s's etcd CA issued for job alone
// (valid for its deadline and jobCertMargin), its key and the CA's trust bundle.
func (b *Backend) jobSecret(ctx context.Context, h *host, s *Spec, job *batchv1.Job, leaf certs.Leaf) (*corev1.Secret, error) {
	ca, err := b.etcdCA(ctx, h, s)
	if err != nil {
		return nil, err
	}
	leaf.Validity = jobCertValidity(job)
	cert, key, err := ca.ca.Issue(leaf)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{ObjectMeta: s.backupSpec().meta(job.Name, job.Labels[LabelComponent]), Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.bundle()}}, nil
}

// etcdCA is the etcd CA of the control plane of s (pki.go's, with the backend's lifetime), which
// the certificates of the snapshot, maintenance and serve Jobs are issued by; its rotation is left
// where it is (the pki component moves it).
func (b *Backend) etcdCA(ctx context.Context, h *host, s *Spec) (*rotatingCA, error) {
	return ensureCA(ctx, h.client, s, SecretEtcdCA, "etcd-ca", b.opts.Certificates, nil)
}
