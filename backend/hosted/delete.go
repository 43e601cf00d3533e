package hosted

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// Delete is Backend.Delete with the bound ProviderConfig.
func (v *Bound) Delete(ctx context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	return v.Backend.delete(ctx, cl, v.pc)
}

// Delete deletes cl's namespace in its host cluster; it is gone when the namespace is.
func (b *Backend) Delete(ctx context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	pc, err := b.config(ctx, cl)
	if err != nil {
		pc = &providersv1alpha1.ProviderConfig{} // gone: look on the status's seed and the platform
	}
	return b.delete(ctx, cl, pc)
}

// delete is Delete with cl's ProviderConfig pc.
func (b *Backend) delete(ctx context.Context, cl *clustersv1alpha1.Cluster, pc *providersv1alpha1.ProviderConfig) (bool, error) {
	h, _, found, err := b.locate(ctx, cl, seedOf(pc))
	if err != nil || h == nil {
		return false, err
	}
	name := NamespaceFor(cl.UID)
	if !found {
		return b.gone(ctx, h, cl)
	}
	ns := &corev1.Namespace{}
	if err := h.client.Get(ctx, client.ObjectKey{Name: name}, ns); apierrors.IsNotFound(err) {
		return b.gone(ctx, h, cl)
	} else if err != nil {
		return false, err
	}
	if ns.DeletionTimestamp == nil {
		b.opts.Logger.Info("Deleting a hosted control plane", "cluster", backend.RefOf(cl).String(), "namespace", name)
		if err := h.client.Delete(ctx, ns, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting namespace %s: %w", name, err)
		}
	}
	return false, nil
}

// gone finishes the deletion of cl, whose namespace on h is gone: its snapshots stay (they
// outlive the Cluster), and the encryption keys beside them that they need (those none needs
// go, and the copy with the last snapshot); its snapshot, maintenance and serve Jobs and their
// Secrets (their certificates, the serve's token) go, and so does the long-lived etcd client
// certificate of an earlier version.
func (b *Backend) gone(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster) (bool, error) {
	names := namesFor(NamespaceFor(cl.UID))
	serve := serveName(NamespaceFor(cl.UID))
	for _, obj := range []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.maintain}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.job}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: serve}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.maintain}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.job}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: serve}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.shared}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: serve}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: storePolicyName(NamespaceFor(cl.UID))}},
	} {
		if err := h.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting %T %s/%s: %w", obj, BackupNamespace, obj.GetName(), err)
		}
	}
	if removed, err := b.settleGoneKeys(ctx, h, cl); err != nil {
		b.opts.Logger.Error(err, "Removing the encryption keys no snapshot of a deleted Cluster needs failed; they stay beside the snapshots", "cluster", backend.RefOf(cl).String())
	} else if len(removed) > 0 {
		b.opts.Logger.Info("Removed encryption keys no snapshot of a deleted Cluster needs", "cluster", backend.RefOf(cl).String(), "keys", removed)
	}
	h.owned.Delete(NamespaceFor(cl.UID))
	h.memo.forget(NamespaceFor(cl.UID))
	h.forgetApplied(NamespaceFor(cl.UID))
	b.forget(cl)
	b.freed(cl)
	return true, nil
}

func (b *Backend) forget(cl *clustersv1alpha1.Cluster) {
	b.mu.Lock()
	delete(b.admin, cl.UID)
	delete(b.asleep, cl.UID)
	delete(b.wanted, cl.UID)
	delete(b.doors, cl.UID)
	backend.SetHibernated(Name, len(b.asleep))
	delete(b.where, cl.UID)
	delete(b.rolling, cl.UID)
	delete(b.waiting, cl.UID)
	b.mu.Unlock()
	backend.ForgetCertificates(backend.RefOf(cl))
}

// seedOf is the seed pc's control planes run on; nil: the platform.
func seedOf(pc *providersv1alpha1.ProviderConfig) *providersv1alpha1.SeedRef {
	if pc.Spec.Hosted == nil {
		return nil
	}
	return pc.Spec.Hosted.Seed
}
