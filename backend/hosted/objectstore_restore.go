package hosted

import (
	"context"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// Restores from the object store: a snapshot the claim's list lacks, or any snapshot once the
// claim is gone (lost with its node, and deleted), is served by a serve that fetches it from the
// store (cmd/etcd-snapshot serve --store-…: decrypted, its SHA-256 checked) onto an emptyDir of
// its own, with the store's credentials copied into its Secret.

// CheckRestore is Backend.CheckRestore, the object store's snapshots listed too.
func (v *Bound) CheckRestore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) (backend.Snapshot, error) {
	snap, _, err := v.Backend.checkRestore(ctx, cl, name, objectStoreOf(v.pc))
	return snap, err
}

// Restore is Backend.Restore, from the object store when the claim lacks the snapshot.
func (v *Bound) Restore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) error {
	return v.Backend.restore(ctx, cl, name, objectStoreOf(v.pc))
}

// storeKept are the encryption keys uploaded with snapshot snap to the store of s, for a restore
// from the store whose keys are not kept beside the snapshots (keys-hcp-… lost with its host).
func (b *Backend) storeKept(ctx context.Context, s *Spec, snap backend.Snapshot) (keptCopy, error) {
	var k keptCopy
	if s.ObjectStore == nil {
		return k, nil
	}
	cat, err := b.catalog(ctx, s.ObjectStore)
	if err != nil {
		return k, err
	}
	data, err := cat.Keys(ctx, snap)
	if err != nil || data == nil {
		return k, err
	}
	if err := json.Unmarshal(data, &k.Kept); err != nil {
		return k, fmt.Errorf("the encryption keys uploaded with snapshot %s do not read: %w", snap.Ref(), err)
	}
	k.found = true
	return k, nil
}

// claimUsable reports whether the snapshots' claim of the control plane in namespace ns exists
// and is not being deleted.
func claimUsable(ctx context.Context, h *host, ns string) (bool, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	err := h.client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: namesFor(ns).claim}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading claim %s/%s: %w", BackupNamespace, namesFor(ns).claim, err)
	}
	return pvc.DeletionTimestamp == nil, nil
}

// inStore finds snapshot name of the Cluster with uid in the store cfg, for cl.
func (b *Backend) inStore(ctx context.Context, cfg *providersv1alpha1.BackupObjectStore, uid types.UID, name string, cl *clustersv1alpha1.Cluster) (backend.Snapshot, error) {
	cat, err := b.catalog(ctx, cfg)
	if err != nil {
		return backend.Snapshot{}, err
	}
	all, err := cat.List(ctx, cl.Namespace, uid)
	if err != nil && all == nil {
		return backend.Snapshot{}, backend.Errorf(backend.ReasonBackupUnavailable, "listing the snapshots in the object store: %v", err)
	}
	return snapshots.Find(all, uid, name, cl.Namespace, cl.UID)
}

// serveFromStore makes the serve job (of the control plane in namespace ns, of a Cluster of
// namespace clusterNS) fetch its snapshot from the store cfg onto an emptyDir instead of reading
// the claim.
func serveFromStore(job *batchv1.Job, ns, clusterNS string, cfg *providersv1alpha1.BackupObjectStore) {
	pod := &job.Spec.Template.Spec
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "snapshots" {
			pod.Volumes[i].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
	}
	for i := range pod.Containers[0].VolumeMounts {
		if m := &pod.Containers[0].VolumeMounts[i]; m.Name == "snapshots" {
			m.ReadOnly = false
		}
	}
	withObjectStore(job, serveJobs, ns, clusterNS, cfg)
}
