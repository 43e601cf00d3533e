package hosted

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// read the Job's result (dropJob, endServe, gone); if it never does, the garbage collector deletes
// it with the Job; either way the certificate ends within hours of its Job's start.

// jobCertMargin is how long a Job's certificate outlives the Job's deadline: its pod's scheduling
// and start, and clocks that differ (certs.Issue also dates it from an hour back).
const jobCertMargin = 15 * time.Minute

// jobCertValidity is how long the certificate made for job is valid: its deadline and
// jobCertMargin.
func jobCertValidity(job *batchv1.Job) time.Duration {
	return time.Duration(ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0))*time.Second + jobCertMargin
}

// etcdClientSecret makes BackupNamespace and its NetworkPolicy, removes the etcd client
// certificate earlier versions kept there for all of s's Jobs (valid for the backend's leaf
// lifetime, a year by default), and returns the Secret job mounts: an etcd client certificate
// (snapshotUser, client authentication) of s's etcd CA issued for job alone.
func (b *Backend) etcdClientSecret(ctx context.Context, h *host, s *Spec, job *batchv1.Job) (*corev1.Secret, error) {
	bs := s.backupSpec()
	for _, obj := range []client.Object{bs.BackupNamespaceObject(), bs.BackupNetworkPolicy()} {
		if err := h.apply(ctx, obj); err != nil {
			return nil, err
		}
	}
	shared := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: namesFor(s.Namespace).shared}}
	if err := h.client.Delete(ctx, shared); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("deleting Secret %s/%s, the long-lived etcd client certificate of an earlier version: %w", shared.Namespace, shared.Name, err)
	}
	ca, err := b.etcdCA(ctx, h, s)
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.Issue(certs.Leaf{CommonName: snapshotUser, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: jobCertValidity(job)})
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{ObjectMeta: bs.meta(job.Name, job.Labels[LabelComponent]), Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.CertPEM}}, nil
}

// startJob creates job with sec, the Secret of the same name that it mounts, made for it: sec
// replaces any earlier Secret of its name, is written before job so that job's pod finds it, and
// is then made job's (an ownerReference: the garbage collector deletes it with job). A Job of the
// name that exists already (another replica of the operator started it) is kept and gets sec.
func startJob(ctx context.Context, h *host, job *batchv1.Job, sec *corev1.Secret) error {
	if sec.Namespace != job.Namespace || sec.Name != job.Name {
		return fmt.Errorf("the Secret of Job %s/%s is named %s/%s", job.Namespace, job.Name, sec.Namespace, sec.Name)
	}
	if err := h.client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sec.Namespace, Name: sec.Name}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the Secret of an earlier Job %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	if err := h.client.Create(ctx, sec); err != nil {
		return fmt.Errorf("creating Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	if err := h.client.Create(ctx, job); apierrors.IsAlreadyExists(err) {
		if err := h.client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return fmt.Errorf("reading Job %s/%s: %w", job.Namespace, job.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("creating Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	// Not blockOwnerDeletion: deleting the Job does not wait for its Secret (and needs no
	// permission on the Jobs' finalizers).
	patch := client.MergeFrom(sec.DeepCopy())
	sec.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}
	if err := h.client.Patch(ctx, sec, patch); err != nil {
		return fmt.Errorf("making Secret %s/%s its Job's: %w", sec.Namespace, sec.Name, err)
	}
	return nil
}

// dropJob deletes a Job of BackupNamespace that ended (its pod with it) and the Secret made for it,
// and returns err.
func dropJob(ctx context.Context, h *host, job *batchv1.Job, err error) error {
	for _, obj := range []client.Object{job, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name}}} {
		if derr := h.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(derr) != nil {
			err = errors.Join(err, fmt.Errorf("deleting %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), derr))
		}
	}
	return err
}
