package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Reasons of the snapshots taken before an upgrade and before a deletion.
const (
	// ReasonSnapshotBeforeUpgrade (Event): the snapshot taken before an upgrade; the upgrade
	// starts after it.
	ReasonSnapshotBeforeUpgrade = "SnapshotBeforeUpgrade"
	// ReasonSnapshotBeforeUpgradeFailed (condition VersionUpToDate): the snapshot before the
	// upgrade failed; the cluster keeps running its version until it succeeds or is skipped.
	ReasonSnapshotBeforeUpgradeFailed = "SnapshotBeforeUpgradeFailed"
	// ReasonSnapshotBeforeDelete (Event): the snapshot taken before the cluster is deleted.
	ReasonSnapshotBeforeDelete = "SnapshotBeforeDelete"
	// ReasonSnapshotBeforeDeleteFailed (condition Deleted): the snapshot before the deletion
	// failed; the cluster is not deleted until it succeeds or is skipped.
	ReasonSnapshotBeforeDeleteFailed = "SnapshotBeforeDeleteFailed"
	// ReasonDeletedWithoutSnapshot (Event): the cluster did not serve, so no snapshot was taken
	// before its deletion.
	ReasonDeletedWithoutSnapshot = "DeletedWithoutSnapshot"
)

// hold is an upgrade held back until the snapshot before it is taken: condition VersionUpToDate
// False with reason and message, looked at again after requeue (or when the backend notifies).
type hold struct {
	reason, message string
	requeue         time.Duration
}

// beforeUpgrade is what Ensure is asked for: when cl asks for another version than its cluster
// runs (its k8sversion label) and the backend takes snapshots, a snapshot is taken first (once per
// target version, recorded in AnnotationSnapshotBeforeUpgrade, Event SnapshotBeforeUpgrade); until
// it is, Ensure is asked for the running version and the hold says why. A change the backend
// refuses anyway, and AnnotationSkipSnapshotBeforeUpgrade, go straight on.
func (r *Reconciler) beforeUpgrade(ctx context.Context, cl *clustersv1alpha1.Cluster) (backend.Want, *hold, error) {
	want := r.want(cl)
	bk, ok := r.Backend.(backend.Backups)
	running := cl.Labels[clustersv1alpha1.K8sVersionLabel]
	if !ok || running == "" {
		return want, nil, nil
	}
	_, change, err := backend.Resolve(running, want)
	if err != nil || change == nil || change.Refused {
		return want, nil, nil // Ensure says what it makes of it
	}
	if _, skip := cl.Annotations[backend.AnnotationSkipSnapshotBeforeUpgrade]; skip {
		return want, nil, nil
	}
	if v, _, _ := strings.Cut(cl.Annotations[backend.AnnotationSnapshotBeforeUpgrade], " "); v == change.To {
		return want, nil, nil
	}
	if c := meta.FindStatusCondition(cl.Status.Conditions, ConditionVersionUpToDate); c != nil && c.Reason == backend.ReasonUpgrading {
		return want, nil, nil // under way already: the snapshot came before, or the upgrade before this check
	}
	pinned := backend.WantOf(r.Offer, running)
	snap, err := bk.Snapshot(ctx, cl, backend.RetentionOf(r.Backup))
	switch {
	case backend.IsReason(err, backend.ReasonSnapshotInProgress):
		return pinned, &hold{reason: backend.ReasonSnapshotInProgress, requeue: snapshotSafetyNet, message: fmt.Sprintf(
			"Taking a snapshot of etcd before the upgrade from Kubernetes %s to %s; the upgrade starts once it is taken.", change.From, change.To)}, nil
	case err != nil:
		metricBackupFailures.WithLabelValues(refName(cl)).Inc()
		return pinned, &hold{reason: ReasonSnapshotBeforeUpgradeFailed, requeue: retryBackup, message: fmt.Sprintf(
			"The upgrade from Kubernetes %s to %s waits for a snapshot of etcd, which failed: %s. The cluster keeps running %s and the snapshot is tried again; to upgrade without it, annotate the Cluster with %s.",
			change.From, change.To, err.Error(), change.From, backend.AnnotationSkipSnapshotBeforeUpgrade)}, nil
	}
	r.snapshotTaken(cl, snap, ReasonSnapshotBeforeUpgrade)
	log.FromContext(ctx).Info("Took a snapshot before the upgrade", "snapshot", snap.Name, "from", change.From, "to", change.To)
	if err := setAnnotation(ctx, r, cl, backend.AnnotationSnapshotBeforeUpgrade, change.To+" "+snap.Name); err != nil {
		return pinned, nil, fmt.Errorf("recording snapshot %s taken before the upgrade: %w", snap.Name, err)
	}
	return want, nil, nil
}

// apply sets condition VersionUpToDate of cl from the hold, over what the state said.
func (h *hold) apply(cl *clustersv1alpha1.Cluster) {
	if h != nil {
		setCondition(cl, ConditionVersionUpToDate, false, h.reason, h.message)
	}
}

// beforeDelete takes the snapshot of cl's etcd before its cluster is deleted, unless the
// ProviderConfig turns it off (spec.backup.snapshotBeforeDelete: false), the Cluster has
// AnnotationSkipSnapshotBeforeDelete, the backend takes no snapshots, or the cluster does not
// serve (no data to save: deleted without one, said in an Event). wait is true while the
// deletion waits for it: in progress, or failed (condition Deleted says why and how to skip).
func (r *Reconciler) beforeDelete(ctx context.Context, cl *clustersv1alpha1.Cluster) (res reconcile.Result, wait bool, err error) {
	bk, ok := r.Backend.(backend.Backups)
	if !ok || !r.Backup.SnapshotsBeforeDelete() {
		return res, false, nil
	}
	if _, skip := cl.Annotations[backend.AnnotationSkipSnapshotBeforeDelete]; skip {
		return res, false, nil
	}
	if _, done := cl.Annotations[backend.AnnotationSnapshotBeforeDelete]; done {
		return res, false, nil
	}
	if !serves(cl) {
		r.Event(cl, "Warning", ReasonDeletedWithoutSnapshot, "Delete",
			"The cluster does not serve: it is deleted without a snapshot before; its earlier snapshots stay.")
		return res, false, setAnnotation(ctx, r, cl, backend.AnnotationSnapshotBeforeDelete, "-")
	}
	snap, err := bk.Snapshot(ctx, cl, backend.RetentionOf(r.Backup))
	switch {
	case backend.IsReason(err, backend.ReasonSnapshotInProgress):
		res, err = r.writeStatus(ctx, cl, cl.DeepCopy(), func() {
			setCondition(cl, ConditionDeleted, false, backend.ReasonSnapshotInProgress, "Taking a snapshot of etcd before the cluster is deleted.")
		})
		return reconcile.Result{RequeueAfter: snapshotSafetyNet}, true, err
	case err != nil:
		metricBackupFailures.WithLabelValues(refName(cl)).Inc()
		msg := fmt.Sprintf("The cluster is not deleted: the snapshot of etcd before its deletion failed: %s. It is tried again; to delete the cluster without it, annotate the Cluster with %s or set spec.backup.snapshotBeforeDelete to false in the ProviderConfig of profile %s.",
			err.Error(), backend.AnnotationSkipSnapshotBeforeDelete, r.Profile)
		_, err = r.writeStatus(ctx, cl, cl.DeepCopy(), func() {
			before := cl.Status.DeepCopy()
			setCondition(cl, ConditionDeleted, false, ReasonSnapshotBeforeDeleteFailed, msg)
			if changed, _ := transition(before.Conditions, cl.Status.Conditions, ConditionDeleted); changed {
				r.Event(cl, "Warning", ReasonSnapshotBeforeDeleteFailed, "Delete", "%s", msg)
			}
		})
		return reconcile.Result{RequeueAfter: retryBackup}, true, err
	}
	r.snapshotTaken(cl, snap, ReasonSnapshotBeforeDelete)
	return res, false, setAnnotation(ctx, r, cl, backend.AnnotationSnapshotBeforeDelete, snap.Name)
}

// serves reports whether cl's cluster served at the last look: provisioned and its API server
// ready.
func serves(cl *clustersv1alpha1.Cluster) bool {
	return meta.IsStatusConditionTrue(cl.Status.Conditions, ConditionProvisioned) &&
		meta.IsStatusConditionTrue(cl.Status.Conditions, ConditionAPIServerReady)
}

// setAnnotation sets annotation key of cl to value with a locked patch.
func setAnnotation(ctx context.Context, r *Reconciler, cl *clustersv1alpha1.Cluster, key, value string) error {
	base := cl.DeepCopy()
	if cl.Annotations == nil {
		cl.Annotations = map[string]string{}
	}
	cl.Annotations[key] = value
	return r.Client.Patch(ctx, cl, kit.LockedMergeFrom(base))
}
